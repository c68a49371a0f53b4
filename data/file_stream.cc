#include "data/file_stream.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "common/error.h"
#include "common/syscheck.h"
#include "data/read_queue.h"

namespace hsring::data {

namespace {
struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};
}  // namespace

void stream_file(const File& file, uint64_t begin, uint64_t end, const StreamOptions& options,
                 const std::function<void(const std::byte*, size_t)>& consume) {
  if (options.chunk_bytes == 0 || options.depth == 0)
    throw Error(Errc::kData, "stream chunk size and depth must be > 0");
  if (end <= begin) return;
  const uint64_t chunk = options.chunk_bytes;
  const uint64_t chunks = (end - begin + chunk - 1) / chunk;
  const uint32_t depth = uint32_t(std::min<uint64_t>(options.depth, chunks));
  // Page-aligned buffers: the kernel copies into them without splitting pages.
  std::unique_ptr<std::byte, FreeDeleter> memory(
      static_cast<std::byte*>(std::aligned_alloc(4096, ((depth * chunk + 4095) / 4096) * 4096)));
  if (!memory) throw std::bad_alloc();
  std::vector<bool> done(depth, false);
  // Declared after the buffers, so it is destroyed (waiting for its reads) before them.
  ReadQueue queue(depth);

  auto length_of = [&](uint64_t k) { return uint32_t(std::min(chunk, end - begin - k * chunk)); };
  auto buffer_of = [&](uint64_t k) { return memory.get() + (k % depth) * chunk; };
  for (uint64_t k = 0; k < depth; ++k)
    queue.read(file.fd(), buffer_of(k), length_of(k), begin + k * chunk, k);

  for (uint64_t head = 0; head < chunks;) {
    const ReadResult r = *queue.poll(true);
    if (r.error != 0) throw sys_error(Errc::kData, r.error, file.path(), r.stop_offset, "read");
    if (r.ended_early)
      throw Error(Errc::kData, file.path(), r.stop_offset,
                  fmt::format("file ends early (it is {} bytes, at least {} expected)",
                              r.stop_offset, end));
    done[r.tag % depth] = true;
    // Deliver in file order; each delivered chunk's buffer takes the read `depth` ahead.
    while (head < chunks && done[head % depth]) {
      consume(buffer_of(head), length_of(head));
      done[head % depth] = false;
      const uint64_t next = head + depth;
      if (next < chunks)
        queue.read(file.fd(), buffer_of(next), length_of(next), begin + next * chunk, next);
      ++head;
    }
  }
}

}  // namespace hsring::data
