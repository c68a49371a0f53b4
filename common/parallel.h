// Fork-join over an index range on the process's thread pool (common/thread_pool.h): the
// CPU models' and trainers' parallel regions (a matmul, an attention pass), each split
// into contiguous chunks whose bounds depend only on the range, the thread count and the
// minimum chunk, never on which thread runs which chunk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace hsring {

// The thread count to use for `requested` (0: every hardware thread).
uint32_t resolve_threads(uint32_t requested);

// Runs body(begin, end) over contiguous chunks covering [0, n) on at most `threads`
// threads, the caller's included, each chunk at least `min_chunk` long. Returns when all are
// done; rethrows the first exception a chunk threw, after every chunk has ended. Results
// are the same for any thread count as long as `body` writes only its range. Chunks may
// run one after another (the pool's threads may be busy), so a body never waits for another
// chunk. A call from inside a body runs its chunks on that body's thread.
void parallel_for(size_t n, uint32_t threads, size_t min_chunk,
                  const std::function<void(size_t begin, size_t end)>& body);

}  // namespace hsring
