#include "model/json.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace hsring {

namespace {

// Deep enough for any real header; shallow enough that nothing built from it recurses far.
constexpr size_t kMaxDepth = 64;

// nlohmann's SAX interface builds the JsonValue tree (so hsring keeps one JSON library and
// its own strictness): duplicate keys and non-finite numbers are refused, members keep
// their document order, and an integer literal keeps its exact value. nlohmann's own
// lexer refuses what RFC 8259 does (invalid UTF-8, lone surrogates, control characters,
// leading zeros, trailing text) and reports the line and column.
class TreeBuilder final : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit TreeBuilder(const std::string& source) : source_(source) {}

  JsonValue take() { return std::move(root_); }

  bool null() override { return add(JsonValue()); }
  bool boolean(bool value) override { return add(JsonValue::boolean(value)); }
  bool number_integer(number_integer_t value) override {
    return add(JsonValue::number(double(value), int64_t(value)));
  }
  bool number_unsigned(number_unsigned_t value) override {
    // Above int64 the value is kept as a double only, like any other non-exact number.
    std::optional<int64_t> exact;
    if (value <= uint64_t(INT64_MAX)) exact = int64_t(value);
    return add(JsonValue::number(double(value), exact));
  }
  bool number_float(number_float_t value, const string_t& literal) override {
    if (!std::isfinite(value)) fail("number out of range: " + literal);
    return add(JsonValue::number(value, std::nullopt));
  }
  bool string(string_t& value) override { return add(JsonValue::string(std::move(value))); }
  bool binary(binary_t&) override { return false; }  // never produced by the text parser

  bool start_object(std::size_t) override { return open(JsonValue::Type::kObject); }
  bool key(string_t& key) override {
    Frame& top = stack_.back();
    for (const auto& [name, value] : top.members)
      if (name == key) fail("duplicate key \"" + key + "\"");
    top.key = std::move(key);
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(JsonValue::Type::kArray); }
  bool end_array() override { return close(); }

  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::detail::exception& error) override {
    // "[json.exception.parse_error.101] parse error at line 3, column 8: syntax error ..."
    std::string what = error.what();
    const size_t at = what.find(" at line ");
    what = at == std::string::npos ? what.substr(what.find(']') + 2) : what.substr(at + 4);
    throw Error(Errc::kModel, source_ + ": " + what);
  }

 private:
  struct Frame {
    JsonValue::Type type;
    JsonValue::Array items;
    JsonValue::Object members;
    std::string key;
  };

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(Errc::kModel, source_ + ": " + what);
  }

  bool add(JsonValue value) {
    if (stack_.empty()) {
      root_ = std::move(value);
    } else if (Frame& top = stack_.back(); top.type == JsonValue::Type::kArray) {
      top.items.push_back(std::move(value));
    } else {
      top.members.emplace_back(std::move(top.key), std::move(value));
    }
    return true;
  }
  bool open(JsonValue::Type type) {
    if (stack_.size() >= kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth));
    stack_.push_back(Frame{type, {}, {}, {}});
    return true;
  }
  bool close() {
    Frame top = std::move(stack_.back());
    stack_.pop_back();
    return add(top.type == JsonValue::Type::kArray ? JsonValue::array(std::move(top.items))
                                                   : JsonValue::object(std::move(top.members)));
  }

  const std::string& source_;
  std::vector<Frame> stack_;
  JsonValue root_;
};

}  // namespace

JsonValue JsonValue::boolean(bool value) {
  JsonValue v;
  v.type_ = Type::kBool;
  v.bool_ = value;
  return v;
}

JsonValue JsonValue::number(double value, std::optional<int64_t> exact) {
  JsonValue v;
  v.type_ = Type::kNumber;
  v.number_ = value;
  v.exact_ = exact;
  return v;
}

JsonValue JsonValue::string(std::string value) {
  JsonValue v;
  v.type_ = Type::kString;
  v.string_ = std::move(value);
  return v;
}

JsonValue JsonValue::array(Array items) {
  JsonValue v;
  v.type_ = Type::kArray;
  v.array_ = std::move(items);
  return v;
}

JsonValue JsonValue::object(Object members) {
  JsonValue v;
  v.type_ = Type::kObject;
  v.object_ = std::move(members);
  return v;
}

const JsonValue* JsonValue::find(std::string_view key) const {
  if (type_ != Type::kObject) return nullptr;
  for (const auto& [name, value] : object_)
    if (name == key) return &value;
  return nullptr;
}

const char* to_string(JsonValue::Type type) {
  switch (type) {
    case JsonValue::Type::kNull:
      return "null";
    case JsonValue::Type::kBool:
      return "a boolean";
    case JsonValue::Type::kNumber:
      return "a number";
    case JsonValue::Type::kString:
      return "a string";
    case JsonValue::Type::kArray:
      return "an array";
    case JsonValue::Type::kObject:
      return "an object";
  }
  return "invalid";
}

JsonValue parse_json(std::string_view text, const std::string& source) {
  TreeBuilder builder(source);
  // Strict: one document (trailing text is an error), no comments.
  nlohmann::json::sax_parse(text.begin(), text.end(), &builder,
                            nlohmann::json::input_format_t::json, true, false);
  return builder.take();
}

std::string describe_json(const JsonValue& value) {
  switch (value.type()) {
    case JsonValue::Type::kBool:
      return value.as_bool() ? "true" : "false";
    case JsonValue::Type::kNumber: {
      if (value.as_int()) return std::to_string(*value.as_int());
      char buf[32];
      const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value.as_double());
      return ec == std::errc() ? std::string(buf, end) : "a number";
    }
    case JsonValue::Type::kString: {
      const std::string& s = value.as_string();
      return "\"" + (s.size() > 40 ? s.substr(0, 40) + "..." : s) + "\"";
    }
    default:
      return to_string(value.type());
  }
}

}  // namespace hsring
