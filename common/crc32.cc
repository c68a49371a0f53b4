#include "common/crc32.h"

#include <zlib.h>

namespace hsring {

uint32_t crc32_update(uint32_t crc, const void* bytes, size_t size) {
  // zlib returns its initial value (0) for a null buffer, whatever `crc` was: an empty
  // span's data() may be null, and continuing over nothing must keep `crc`.
  if (size == 0) return crc;
  // crc32_z takes a size_t length: no 4 GiB limit on one call.
  return uint32_t(::crc32_z(crc, static_cast<const Bytef*>(bytes), size));
}

}  // namespace hsring
