#include "model/json.h"

#include <fmt/format.h>

#include <charconv>
#include <nlohmann/json.hpp>
#include <unordered_set>
#include <vector>

#include "common/error.h"

namespace hsring {

namespace {

// Deep enough for any real header; shallow enough that nothing reading the value recurses
// far.
constexpr size_t kMaxDepth = 64;

// What nlohmann's DOM parser lets through and hsring refuses: a duplicate key (the DOM
// keeps the last, silently) and deep nesting. A SAX pass over the text checks both and
// builds nothing but the keys of the objects still open; nlohmann's own lexer, shared by
// both passes, refuses what RFC 8259 does (invalid UTF-8, lone surrogates, control
// characters, leading zeros, numbers out of range, trailing text) and reports the line and
// column, which this pass turns into hsring's error.
class StrictnessCheck final : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit StrictnessCheck(const std::string& source) : source_(source) {}

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return false; }  // never produced by the text parser

  bool start_object(std::size_t) override {
    open();
    keys_.emplace_back();
    return true;
  }
  bool key(string_t& key) override {
    if (!keys_.back().insert(key).second) fail("duplicate key \"" + key + "\"");
    return true;
  }
  bool end_object() override {
    keys_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override {
    open();
    return true;
  }
  bool end_array() override {
    --depth_;
    return true;
  }

  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::detail::exception& error) override {
    // "[json.exception.parse_error.101] parse error at line 3, column 8: syntax error ..."
    std::string what = error.what();
    const size_t at = what.find(" at line ");
    what = at == std::string::npos ? what.substr(what.find(']') + 2) : what.substr(at + 4);
    fail(what);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(Errc::kModel, source_ + ": " + what);
  }
  void open() {
    if (depth_ >= kMaxDepth) fail(fmt::format("nesting deeper than {}", kMaxDepth));
    ++depth_;
  }

  const std::string& source_;
  size_t depth_ = 0;
  std::vector<std::unordered_set<std::string>> keys_;  // one set per object still open
};

}  // namespace

nlohmann::json parse_json(std::string_view text, const std::string& source) {
  StrictnessCheck check(source);
  // Strict: one document (trailing text is an error), no comments.
  nlohmann::json::sax_parse(text.begin(), text.end(), &check, nlohmann::json::input_format_t::json,
                            true, false);
  try {
    return nlohmann::json::parse(text.begin(), text.end(), nullptr, true, false);
  } catch (const nlohmann::json::exception& e) {
    // The check passed the same text through the same lexer: not expected, but never
    // anything but hsring's error.
    throw Error(Errc::kModel, source + ": " + e.what());
  }
}

std::optional<int64_t> json_int(const nlohmann::json& value) {
  if (value.is_number_integer() && !value.is_number_unsigned())
    return value.get<nlohmann::json::number_integer_t>();
  if (value.is_number_unsigned()) {
    // Above int64 the value is a number like any non-integer one.
    const auto v = value.get<nlohmann::json::number_unsigned_t>();
    if (v <= uint64_t(INT64_MAX)) return int64_t(v);
  }
  return std::nullopt;
}

const nlohmann::json* json_member(const nlohmann::json& value, std::string_view key) {
  if (!value.is_object()) return nullptr;
  const auto it = value.find(key);
  return it == value.end() ? nullptr : &*it;
}

const char* json_kind(const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::boolean:
      return "a boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
    case nlohmann::json::value_t::number_float:
      return "a number";
    case nlohmann::json::value_t::string:
      return "a string";
    case nlohmann::json::value_t::array:
      return "an array";
    case nlohmann::json::value_t::object:
      return "an object";
    default:
      return "invalid";  // binary or discarded: never parsed from text
  }
}

std::string describe_json(const nlohmann::json& value) {
  if (value.is_boolean()) return value.get<bool>() ? "true" : "false";
  if (value.is_number()) {
    if (const std::optional<int64_t> exact = json_int(value)) return std::to_string(*exact);
    char buf[32];
    const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value.get<double>());
    return ec == std::errc() ? std::string(buf, end) : "a number";
  }
  if (value.is_string()) {
    const auto& s = value.get_ref<const std::string&>();
    return "\"" + (s.size() > 40 ? s.substr(0, 40) + "..." : s) + "\"";
  }
  return json_kind(value);
}

}  // namespace hsring
