#include "ops/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/contract.h"
#include "common/parallel.h"
#include "ops/argmax.h"
#include "ops/sums.h"

namespace hsring::ops {

template <class Real>
CrossEntropySums cross_entropy(const Real* logits, const int32_t* labels, size_t rows, size_t vocab,
                               double grad_scale, Real* dlogits, uint32_t threads) {
  HSRING_REQUIRE(std::all_of(labels, labels + rows,
                             [vocab](int32_t label) { return label < int64_t(vocab); }));
  enum : uint8_t { kIgnored = 0, kCounted = 1, kAgreed = 2 };
  std::vector<double> row_loss(rows, 0.0);
  std::vector<uint8_t> row_state(rows, kIgnored);
  parallel_for(rows, threads_for(rows * vocab * 8, threads), 1, [&](size_t begin, size_t end) {
    for (size_t r = begin; r < end; ++r) {
      const Real* x = logits + r * vocab;
      Real* d = dlogits ? dlogits + r * vocab : nullptr;
      const int32_t label = labels[r];
      if (label < 0) {
        if (d) std::fill(d, d + vocab, Real(0));
        continue;
      }
      const auto best = size_t(argmax(x, vocab));
      const double max_logit = x[best];
      double total = 0;
      for (size_t i = 0; i < vocab; ++i) total += std::exp(double(x[i]) - max_logit);
      const double lse = max_logit + std::log(total);
      row_loss[r] = lse - double(x[label]);
      row_state[r] = best == size_t(label) ? kAgreed : kCounted;
      if (d) {
        for (size_t i = 0; i < vocab; ++i) {
          const double p = std::exp(double(x[i]) - lse);
          d[i] = Real(grad_scale * (i == size_t(label) ? p - 1.0 : p));
        }
      }
    }
  });
  // Summed in row order: the same bits for any thread count.
  CrossEntropySums sums;
  for (size_t r = 0; r < rows; ++r) {
    if (row_state[r] == kIgnored) continue;
    sums.loss += row_loss[r];
    ++sums.counted;
    if (row_state[r] == kAgreed) ++sums.agreed;
  }
  return sums;
}

template CrossEntropySums cross_entropy(const float*, const int32_t*, size_t, size_t, double,
                                        float*, uint32_t);
template CrossEntropySums cross_entropy(const double*, const int32_t*, size_t, size_t, double,
                                        double*, uint32_t);

}  // namespace hsring::ops
