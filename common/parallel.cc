#include "common/parallel.h"

#include <algorithm>
#include <thread>
#include <vector>

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
  {
    // jthreads join on scope exit, also when starting one of them throws.
    std::vector<std::jthread> workers;
    workers.reserve(chunks - 1);
    for (size_t c = 1; c < chunks; ++c)
      workers.emplace_back([&body, b = chunk_begin(c), e = chunk_begin(c + 1)] { body(b, e); });
    body(0, chunk_begin(1));
  }
}

}  // namespace hsring
