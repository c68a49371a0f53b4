// A strict JSON (RFC 8259) reader for the small documents the model loader trusts least:
// config.json, safetensors headers and shard indexes, on nlohmann-json's parser. It also
// rejects duplicate keys and invalid UTF-8, and keeps integers exact, so a garbage header
// fails loudly instead of half-parsing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hsring {

class JsonValue {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  using Array = std::vector<JsonValue>;
  using Object = std::vector<std::pair<std::string, JsonValue>>;  // in document order

  JsonValue() = default;  // null
  static JsonValue boolean(bool value);
  // `exact` holds the value when the literal is an integer (no fraction, no exponent) that
  // fits int64; offsets and sizes are read through it, never through the double.
  static JsonValue number(double value, std::optional<int64_t> exact);
  static JsonValue string(std::string value);
  static JsonValue array(Array items);
  static JsonValue object(Object members);

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  // Each REQUIRES the matching type.
  bool as_bool() const { return bool_; }
  double as_double() const { return number_; }
  std::optional<int64_t> as_int() const { return exact_; }
  const std::string& as_string() const { return string_; }
  const Array& as_array() const { return array_; }
  const Object& as_object() const { return object_; }

  // The member named `key`, or nullptr when absent or when this is not an object.
  const JsonValue* find(std::string_view key) const;

 private:
  Type type_ = Type::kNull;
  bool bool_ = false;
  double number_ = 0;
  std::optional<int64_t> exact_;
  std::string string_;
  Array array_;
  Object object_;
};

const char* to_string(JsonValue::Type type);

// Parses one JSON document (surrounding whitespace allowed). Throws Error(kModel)
// "<source>: line L, column C: <what is wrong>".
JsonValue parse_json(std::string_view text, const std::string& source);

// A short rendering of `value` for error messages: scalars in full, containers by kind.
std::string describe_json(const JsonValue& value);

}  // namespace hsring
