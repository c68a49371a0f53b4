// CRC-32 as zlib and Python's zlib.crc32 compute it (reflected polynomial 0xEDB88320), so
// a shard written by a few lines of Python carries checksums hsring can verify.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hsring::data {

// Continues `crc` (0 for a fresh checksum) over `size` bytes: crc32(b, crc32(a)) equals
// the checksum of a followed by b.
uint32_t crc32_update(uint32_t crc, const void* bytes, size_t size);

inline uint32_t crc32(const void* bytes, size_t size) { return crc32_update(0, bytes, size); }

}  // namespace hsring::data
