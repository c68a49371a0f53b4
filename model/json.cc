#include "model/json.h"

#include <charconv>
#include <cmath>

#include "model/model_error.h"

namespace hsring {

namespace {

// Deep enough for any real header; shallow enough that recursion cannot blow the stack.
constexpr int kMaxDepth = 64;

class Parser {
 public:
  Parser(std::string_view text, const std::string& source) : text_(text), source_(source) {}

  JsonValue document() {
    skip_whitespace();
    JsonValue value = parse_value(0);
    skip_whitespace();
    if (pos_ != text_.size()) fail("unexpected text after the JSON value");
    return value;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    size_t line = 1;
    size_t column = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    throw ModelError(ModelErrc::kBadJson, source_ + ": line " + std::to_string(line) + ", column " +
                                              std::to_string(column) + ": " + what);
  }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  void skip_whitespace() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r'))
      ++pos_;
  }

  void expect_literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) fail("invalid literal");
    pos_ += word.size();
  }

  JsonValue parse_value(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth));
    if (at_end()) fail("unexpected end of input, expected a value");
    switch (peek()) {
      case '{':
        return parse_object(depth);
      case '[':
        return parse_array(depth);
      case '"':
        return JsonValue::string(parse_string());
      case 't':
        expect_literal("true");
        return JsonValue::boolean(true);
      case 'f':
        expect_literal("false");
        return JsonValue::boolean(false);
      case 'n':
        expect_literal("null");
        return JsonValue();
      default:
        if (peek() == '-' || (peek() >= '0' && peek() <= '9')) return parse_number();
        fail(std::string("unexpected character '") + peek() + "'");
    }
  }

  JsonValue parse_object(int depth) {
    ++pos_;  // '{'
    JsonValue::Object members;
    skip_whitespace();
    if (peek() == '}') {
      ++pos_;
      return JsonValue::object(std::move(members));
    }
    while (true) {
      skip_whitespace();
      if (peek() != '"') fail("expected a string key");
      const size_t key_at = pos_;
      std::string key = parse_string();
      for (const auto& [existing, unused] : members) {
        if (existing == key) {
          pos_ = key_at;
          fail("duplicate key \"" + key + "\"");
        }
      }
      skip_whitespace();
      if (peek() != ':') fail("expected ':' after a key");
      ++pos_;
      skip_whitespace();
      JsonValue value = parse_value(depth + 1);
      members.emplace_back(std::move(key), std::move(value));
      skip_whitespace();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == '}') {
        ++pos_;
        return JsonValue::object(std::move(members));
      }
      fail("expected ',' or '}' in an object");
    }
  }

  JsonValue parse_array(int depth) {
    ++pos_;  // '['
    JsonValue::Array items;
    skip_whitespace();
    if (peek() == ']') {
      ++pos_;
      return JsonValue::array(std::move(items));
    }
    while (true) {
      skip_whitespace();
      items.push_back(parse_value(depth + 1));
      skip_whitespace();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == ']') {
        ++pos_;
        return JsonValue::array(std::move(items));
      }
      fail("expected ',' or ']' in an array");
    }
  }

  uint32_t parse_hex4() {
    if (pos_ + 4 > text_.size()) fail("truncated \\u escape");
    uint32_t value = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_++];
      value <<= 4;
      if (c >= '0' && c <= '9')
        value |= uint32_t(c - '0');
      else if (c >= 'a' && c <= 'f')
        value |= uint32_t(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        value |= uint32_t(c - 'A' + 10);
      else
        fail("invalid hex digit in \\u escape");
    }
    return value;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }

  // Copies one UTF-8 sequence starting at pos_, rejecting overlongs and surrogates.
  void copy_utf8(std::string& out) {
    const auto lead = uint8_t(text_[pos_]);
    int extra = 0;
    uint32_t cp = 0;
    if (lead >= 0xC2 && lead <= 0xDF) {
      extra = 1;
      cp = lead & 0x1F;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      extra = 2;
      cp = lead & 0x0F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      extra = 3;
      cp = lead & 0x07;
    } else {
      fail("invalid UTF-8 in a string");
    }
    if (pos_ + extra >= text_.size()) fail("truncated UTF-8 sequence in a string");
    for (int i = 1; i <= extra; ++i) {
      const auto c = uint8_t(text_[pos_ + i]);
      if ((c & 0xC0) != 0x80) fail("invalid UTF-8 in a string");
      cp = (cp << 6) | (c & 0x3F);
    }
    const uint32_t min_cp[] = {0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      fail("invalid UTF-8 in a string");
    out.append(text_.substr(pos_, size_t(extra) + 1));
    pos_ += size_t(extra) + 1;
  }

  std::string parse_string() {
    ++pos_;  // '"'
    std::string out;
    while (true) {
      if (at_end()) fail("unterminated string");
      const char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (uint8_t(c) < 0x20) fail("control character in a string");
      if (uint8_t(c) >= 0x80) {
        copy_utf8(out);
        continue;
      }
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      ++pos_;
      if (at_end()) fail("unterminated escape");
      const char e = text_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          uint32_t cp = parse_hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) fail("lone low surrogate in \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (text_.substr(pos_, 2) != "\\u") fail("high surrogate without a low surrogate");
            pos_ += 2;
            const uint32_t low = parse_hex4();
            if (low < 0xDC00 || low > 0xDFFF) fail("high surrogate without a low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default:
          --pos_;
          fail(std::string("invalid escape '\\") + e + "'");
      }
    }
  }

  JsonValue parse_number() {
    const size_t start = pos_;
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
      if (peek() >= '0' && peek() <= '9') fail("leading zero in a number");
    } else if (peek() >= '1' && peek() <= '9') {
      while (peek() >= '0' && peek() <= '9') ++pos_;
    } else {
      fail("expected a digit");
    }
    bool integral = true;
    if (peek() == '.') {
      integral = false;
      ++pos_;
      if (!(peek() >= '0' && peek() <= '9')) fail("expected a digit after '.'");
      while (peek() >= '0' && peek() <= '9') ++pos_;
    }
    if (peek() == 'e' || peek() == 'E') {
      integral = false;
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!(peek() >= '0' && peek() <= '9')) fail("expected a digit in the exponent");
      while (peek() >= '0' && peek() <= '9') ++pos_;
    }
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    double value = 0;
    const auto [end, ec] = std::from_chars(first, last, value);
    if (ec != std::errc() || end != last || !std::isfinite(value)) {
      pos_ = start;
      fail("number out of range");
    }
    std::optional<int64_t> exact;
    if (integral) {
      int64_t i = 0;
      const auto [iend, iec] = std::from_chars(first, last, i);
      if (iec == std::errc() && iend == last) exact = i;
    }
    return JsonValue::number(value, exact);
  }

  std::string_view text_;
  const std::string& source_;
  size_t pos_ = 0;
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
  return Parser(text, source).document();
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
