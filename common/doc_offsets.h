// Document offsets of a packed batch: 0 = o_0 < o_1 < ... < o_D = rows, document d holding
// rows [o_d, o_{d+1}). Every packed kernel REQUIRES them so (checked in sanitizer builds).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace hsring {

// True when `offsets` partition `rows` into non-empty documents in order.
inline bool is_doc_partition(std::span<const int32_t> offsets, size_t rows) {
  if (offsets.empty() || offsets.front() != 0 || offsets.back() < 0 ||
      size_t(offsets.back()) != rows)
    return false;
  for (size_t d = 1; d < offsets.size(); ++d)
    if (offsets[d] <= offsets[d - 1]) return false;
  return true;
}

}  // namespace hsring
