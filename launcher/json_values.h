// Numbers for the launcher's JSON (status --json, --summary-json): a real writer
// (nlohmann-json) does the syntax and the escaping; this says what a number becomes.
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>

namespace hsring {

// Key order as written: the documents list their keys in a fixed, documented order.
using Json = nlohmann::ordered_json;

// `value` rounded to `digits` decimals, or null when it is not finite (a diverged loss):
// JSON has no NaN or infinity, and a reader must not mistake one for a number.
inline Json json_number(double value, int digits) {
  if (!std::isfinite(value)) return nullptr;
  const double scale = std::pow(10.0, digits);
  const double rounded = std::round(value * scale) / scale;
  return std::isfinite(rounded) ? Json(rounded) : Json(value);
}

// The document as text: two-space indents, one trailing newline. Bytes that are not UTF-8
// become U+FFFD instead of an exception (ring names are checked to be UTF-8 already).
inline std::string json_text(const Json& document) {
  return document.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace hsring
