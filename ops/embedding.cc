#include "ops/embedding.h"

#include <algorithm>
#include <vector>

#include "ops/dot.h"

namespace hsring::ops {

template <class Real>
void embedding_forward(const Real* table, const int32_t* tokens, size_t rows, size_t dim, Real* y,
                       bool accumulate) {
  for (size_t r = 0; r < rows; ++r) {
    const Real* e = table + size_t(tokens[r]) * dim;
    Real* yr = y + r * dim;
    for (size_t i = 0; i < dim; ++i) yr[i] = accumulate ? Real(double(yr[i]) + double(e[i])) : e[i];
  }
}

template <class Real>
void embedding_backward(const int32_t* tokens, const Real* dy, size_t rows, size_t dim,
                        Real* dtable) {
  // Rows grouped by token, each group in row order: one double sum per token.
  std::vector<size_t> order(rows);
  for (size_t r = 0; r < rows; ++r) order[r] = r;
  std::stable_sort(order.begin(), order.end(),
                   [tokens](size_t a, size_t b) { return tokens[a] < tokens[b]; });
  std::vector<double> acc(dim);
  for (size_t i = 0; i < rows;) {
    const int32_t token = tokens[order[i]];
    std::fill(acc.begin(), acc.end(), 0.0);
    for (; i < rows && tokens[order[i]] == token; ++i)
      axpy_double(1.0, dy + order[i] * dim, acc.data(), dim);
    Real* row = dtable + size_t(token) * dim;
    for (size_t k = 0; k < dim; ++k) row[k] = Real(double(row[k]) + acc[k]);
  }
}

#define HSRING_OPS_EMBEDDING(Real)                                                           \
  template void embedding_forward(const Real*, const int32_t*, size_t, size_t, Real*, bool); \
  template void embedding_backward(const int32_t*, const Real*, size_t, size_t, Real*);
HSRING_OPS_EMBEDDING(float)
HSRING_OPS_EMBEDDING(double)
#undef HSRING_OPS_EMBEDDING

}  // namespace hsring::ops
