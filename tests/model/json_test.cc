#include "model/json.h"

#include <gtest/gtest.h>

#include <string>

#include "common/error.h"

namespace hsring {
namespace {

std::string parse_error(const std::string& text) {
  try {
    parse_json(text, "doc.json");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kModel);
    return e.what();
  }
  ADD_FAILURE() << "parsed: " << text;
  return "";
}

TEST(JsonTest, ParsesEveryKind) {
  const JsonValue v = parse_json(
      R"( {"a": [1, -2.5, 3e2, true, false, null], "b": {"c": "x\"\\\/\n\u00e9\ud83d\ude00"},
          "big": 9007199254740993, "neg": -0} )",
      "doc");
  ASSERT_TRUE(v.is_object());
  const JsonValue::Array& a = v.find("a")->as_array();
  ASSERT_EQ(a.size(), 6u);
  EXPECT_EQ(*a[0].as_int(), 1);
  EXPECT_DOUBLE_EQ(a[1].as_double(), -2.5);
  EXPECT_FALSE(a[1].as_int().has_value());
  EXPECT_DOUBLE_EQ(a[2].as_double(), 300.0);
  EXPECT_FALSE(a[2].as_int().has_value());  // an exponent makes it a float literal
  EXPECT_TRUE(a[3].as_bool());
  EXPECT_FALSE(a[4].as_bool());
  EXPECT_TRUE(a[5].is_null());
  EXPECT_EQ(v.find("b")->find("c")->as_string(), "x\"\\/\n\xC3\xA9\xF0\x9F\x98\x80");
  EXPECT_EQ(*v.find("big")->as_int(), 9007199254740993);  // exact beyond 2^53
  EXPECT_EQ(*v.find("neg")->as_int(), 0);
  EXPECT_EQ(v.find("missing"), nullptr);
  EXPECT_EQ(a[0].find("x"), nullptr);
}

TEST(JsonTest, KeepsRawUtf8) {
  EXPECT_EQ(parse_json("\"caf\xC3\xA9\"", "doc").as_string(), "caf\xC3\xA9");
}

TEST(JsonTest, RejectsMalformedText) {
  const char* bad[] = {
      "",                  // nothing
      "{",                 // unterminated object
      "{\"a\":1,}",        // trailing comma
      "[1,]",              // trailing comma
      "{a:1}",             // unquoted key
      "{\"a\" 1}",         // missing colon
      "\"abc",             // unterminated string
      "\"a\tb\"",          // raw control character
      "\"\\x\"",           // bad escape
      "\"\\u12\"",         // short \u escape
      "\"\\ud800\"",       // lone high surrogate
      "\"\\udc00\"",       // lone low surrogate
      "01",                // leading zero
      "1.",                // no fraction digits
      "-",                 // no digits
      "1e",                // no exponent digits
      "1e999",             // out of range
      "tru",               // bad literal
      "NaN",               // not JSON
      "{} {}",             // two documents
      "[1] x",             // trailing garbage
      "'a'",               // single quotes
      "\"\xC3\"",          // truncated UTF-8
      "\"\xC0\xAF\"",      // overlong UTF-8
      "\"\xED\xA0\x80\"",  // UTF-8 surrogate
      "\"\xFF\"",          // invalid byte
  };
  for (const char* text : bad) EXPECT_FALSE(parse_error(text).empty()) << text;
}

TEST(JsonTest, RejectsDuplicateKeys) {
  EXPECT_NE(parse_error("{\"a\": 1, \"a\": 2}").find("duplicate key \"a\""), std::string::npos);
}

TEST(JsonTest, ErrorNamesSourceLineAndColumn) {
  const std::string e = parse_error("{\n  \"a\": 1,\n  \"b\": ]\n}");
  EXPECT_NE(e.find("doc.json: line 3, column 8"), std::string::npos) << e;
}

TEST(JsonTest, RejectsDeepNesting) {
  EXPECT_NE(parse_error(std::string(200, '[') + std::string(200, ']')).find("nesting"),
            std::string::npos);
  EXPECT_NO_THROW(parse_json(std::string(30, '[') + std::string(30, ']'), "doc"));
}

TEST(JsonTest, DescribesValuesForMessages) {
  EXPECT_EQ(describe_json(parse_json("12", "d")), "12");
  EXPECT_EQ(describe_json(parse_json("0.5", "d")), "0.5");
  EXPECT_EQ(describe_json(parse_json("\"x\"", "d")), "\"x\"");
  EXPECT_EQ(describe_json(parse_json("[1]", "d")), "an array");
  EXPECT_EQ(describe_json(parse_json("null", "d")), "null");
}

}  // namespace
}  // namespace hsring
