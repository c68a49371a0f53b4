// How the ops sum products: a choice every caller names, because the CPU target's forward
// and training need different things of the same op.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace hsring::ops {

// - kFloat: fp32 sums (8 interleaved lanes and a fixed reduction tree; fp32 elementwise
//   arithmetic). The CPU target's forward: twice the lanes of double, and the rounding the
//   CUDA forward and transformers are compared with. Real must be float.
// - kDouble: every sum of products and every elementwise step in double, rounded once to
//   Real. Training: its backward runs in double, and its gradient checks (Real = double)
//   need sums exact to ~1e-9 for finite differences to check anything.
// Either way each output element is one fixed sequence of operations on its own inputs:
// bit-identical for any thread count and any place of its row in the batch.
enum class Sums : uint8_t { kFloat, kDouble };

// Below this many multiply-adds a call runs on the caller's thread: starting threads would
// cost more than it saves. The split never changes a result (see Sums).
inline uint32_t threads_for(size_t work, uint32_t threads) {
  constexpr size_t kMinParallelWork = size_t(1) << 16;
  return work < kMinParallelWork ? 1u : std::max(1u, threads);
}

}  // namespace hsring::ops
