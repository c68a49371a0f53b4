// Token embedding, forward and backward: y[r] (+)= table[tokens[r]].
#pragma once

#include <cstddef>
#include <cstdint>

namespace hsring::ops {

// table [vocab, dim], y [rows, dim]. Without `accumulate` a plain copy of each row.
// REQUIRES: every token is in [0, vocab).
template <class Real>
void embedding_forward(const Real* table, const int32_t* tokens, size_t rows, size_t dim, Real* y,
                       bool accumulate);

// dtable[v] += sum of dy[r] over rows r with tokens[r] == v (in row order, in double).
template <class Real>
void embedding_backward(const int32_t* tokens, const Real* dy, size_t rows, size_t dim,
                        Real* dtable);

}  // namespace hsring::ops
