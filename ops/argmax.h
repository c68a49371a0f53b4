// The greedy token of a row of logits.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace hsring::ops {

// Index of the largest of x[0..n), the first one on ties; NaNs are skipped (0 if all are).
// The target's greedy label and cross_entropy's agreement both use it.
template <class Real>
int32_t argmax(const Real* x, size_t n) {
  size_t best = 0;
  bool found = false;
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) continue;
    if (!found || x[i] > x[best]) {
      best = i;
      found = true;
    }
  }
  return int32_t(best);
}

}  // namespace hsring::ops
