#include "common/parallel.h"

#include <algorithm>
#include <thread>

#include "common/thread_pool.h"

namespace hsring {

uint32_t resolve_threads(uint32_t requested) {
  if (requested != 0) return requested;
  return std::max(1u, std::thread::hardware_concurrency());
}

void parallel_for(size_t n, uint32_t threads, size_t min_chunk,
                  const std::function<void(size_t, size_t)>& body) {
  if (n == 0) return;
  const size_t max_chunks = std::max<size_t>(1, n / std::max<size_t>(1, min_chunk));
  const size_t chunks = std::min<size_t>(std::max(1u, threads), max_chunks);
  if (chunks == 1) {
    body(0, n);
    return;
  }
  const auto chunk_begin = [n, chunks](size_t c) { return n * c / chunks; };
  ThreadPool::shared().run(chunks, chunks - 1,
                           [&](size_t c) { body(chunk_begin(c), chunk_begin(c + 1)); });
}

}  // namespace hsring
