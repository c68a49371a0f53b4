// Fork-join over an index range with plain threads: enough for the CPU reference, whose
// every parallel region is large (a matmul, an attention pass) and short-lived.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace hsring {

// The thread count to use for `requested` (0: every hardware thread).
uint32_t resolve_threads(uint32_t requested);

// Runs body(begin, end) over contiguous chunks covering [0, n) on at most `threads`
// threads, the caller's included, each chunk at least `min_chunk` long. Returns when all are
// done. Results are the same for any thread count as long as `body` writes only its range.
void parallel_for(size_t n, uint32_t threads, size_t min_chunk,
                  const std::function<void(size_t begin, size_t end)>& body);

}  // namespace hsring
