// Sequential reading of a byte range through io_uring with several chunk reads in flight,
// handed to the caller in file order: the shard verifier's and the benchmark's read path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "data/file_io.h"

namespace hsring::data {

struct StreamOptions {
  uint32_t chunk_bytes = 256u << 10;  // with depth 4: 1 MiB in flight, still cache-resident
  uint32_t depth = 4;                 // chunk reads in flight ahead of the consumer
};

// Calls `consume(bytes, size)` for consecutive chunks of [begin, end) of `file`, in order.
// Throws Error: truncated (naming the byte where the file ended), I/O, bad options;
// exceptions from `consume` propagate after the reads in flight have finished.
void stream_file(const File& file, uint64_t begin, uint64_t end, const StreamOptions& options,
                 const std::function<void(const std::byte*, size_t)>& consume);

}  // namespace hsring::data
