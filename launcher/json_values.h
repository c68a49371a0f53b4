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

// One value on one line, with ", " and ": " between items as the documents always had
// them; the writer does every scalar (escapes, null). Bytes that are not UTF-8 become
// U+FFFD instead of an exception (ring names are checked to be UTF-8 already).
inline std::string json_inline(const Json& value) {
  if (value.is_object() || value.is_array()) {
    std::string out = value.is_object() ? "{" : "[";
    bool first = true;
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      if (value.is_object()) out += json_inline(Json(it.key())) + ": ";
      out += json_inline(it.value());
    }
    return out + (value.is_object() ? "}" : "]");
  }
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The document as text: each top-level key on its own line, its value on that line, but
// an array of objects (status's "processes") one object per line; one trailing newline.
inline std::string json_text(const Json& document) {
  std::string out = "{";
  bool first = true;
  for (auto it = document.begin(); it != document.end(); ++it) {
    out += first ? "\n  " : ",\n  ";
    first = false;
    out += json_inline(Json(it.key())) + ": ";
    const Json& value = it.value();
    if (value.is_array() && !value.empty() && value.front().is_object()) {
      out += "[";
      for (size_t i = 0; i < value.size(); ++i)
        out += (i ? ",\n    " : "\n    ") + json_inline(value[i]);
      out += "\n  ]";
    } else {
      out += json_inline(value);
    }
  }
  return out + "\n}\n";
}

}  // namespace hsring
