// Document offsets of a packed batch: 0 = o_0 < o_1 < ... < o_D = rows, document d holding
// rows [o_d, o_{d+1}). Every packed kernel REQUIRES them so (checked in sanitizer builds).
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

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

// What is wrong with `offsets` as a batch's partition of `rows` into one or more documents
// (`rows` named `rows_name` in the message, "token count" by default), or "" when they are
// one: the message of every batch check. "" exactly when is_doc_partition holds and there
// is a document.
inline std::string doc_partition_problem(std::span<const int32_t> offsets, size_t rows,
                                         std::string_view rows_name = "token count") {
  if (offsets.size() < 2 || offsets.front() != 0 || offsets.back() < 0 ||
      size_t(offsets.back()) != rows) {
    const std::string problem =
        fmt::format("doc_offsets must run from 0 to the {} {}", rows_name, rows);
    if (offsets.empty()) return problem + " (none given)";
    return fmt::format("{} (they run from {} to {})", problem, offsets.front(), offsets.back());
  }
  for (size_t d = 1; d < offsets.size(); ++d)
    if (offsets[d] <= offsets[d - 1])
      return fmt::format("doc_offsets must increase strictly (entry {} is {} after {})", d,
                         offsets[d], offsets[d - 1]);
  return "";
}

}  // namespace hsring
