// Cross-entropy of rows of logits against labels, with top-1 agreement, and its gradient.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hsring::ops {

struct CrossEntropySums {
  double loss = 0;       // sum over counted rows of logsumexp(logits) - logits[label]
  uint64_t counted = 0;  // rows whose label is in [0, vocab)
  uint64_t agreed = 0;   // counted rows whose argmax (ops/argmax.h) equals the label
};

// logits [rows, vocab], in double. When dlogits is not null it receives d(grad_scale *
// loss)/d(logits): grad_scale * (softmax - onehot) on counted rows, zero on ignored ones; it
// may alias logits (forward and backward are one pass over a row).
// REQUIRES: every label is below vocab (negative labels are ignored).
template <class Real>
CrossEntropySums cross_entropy(const Real* logits, const int32_t* labels, size_t rows, size_t vocab,
                               double grad_scale, Real* dlogits, uint32_t threads);

}  // namespace hsring::ops
