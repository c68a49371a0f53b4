#include "model/json.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
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
  const nlohmann::json v = parse_json(
      R"( {"a": [1, -2.5, 3e2, true, false, null], "b": {"c": "x\"\\\/\n\u00e9\ud83d\ude00"},
          "big": 9007199254740993, "neg": -0, "huge": 9223372036854775808} )",
      "doc");
  ASSERT_TRUE(v.is_object());
  const nlohmann::json& a = *json_member(v, "a");
  ASSERT_EQ(a.size(), 6u);
  EXPECT_EQ(*json_int(a[0]), 1);
  EXPECT_DOUBLE_EQ(a[1].get<double>(), -2.5);
  EXPECT_FALSE(json_int(a[1]).has_value());
  EXPECT_DOUBLE_EQ(a[2].get<double>(), 300.0);
  EXPECT_FALSE(json_int(a[2]).has_value());  // an exponent makes it a float literal
  EXPECT_TRUE(a[3].get<bool>());
  EXPECT_FALSE(a[4].get<bool>());
  EXPECT_TRUE(a[5].is_null());
  EXPECT_EQ(json_member(*json_member(v, "b"), "c")->get<std::string>(),
            "x\"\\/\n\xC3\xA9\xF0\x9F\x98\x80");
  EXPECT_EQ(*json_int(*json_member(v, "big")), 9007199254740993);  // exact beyond 2^53
  EXPECT_EQ(*json_int(*json_member(v, "neg")), 0);
  EXPECT_FALSE(json_int(*json_member(v, "huge")).has_value());  // 2^63: beyond int64
  EXPECT_EQ(json_member(v, "missing"), nullptr);
  EXPECT_EQ(json_member(a[0], "x"), nullptr);
  EXPECT_FALSE(json_int(*json_member(v, "b")).has_value());
}

TEST(JsonTest, KeepsRawUtf8) {
  EXPECT_EQ(parse_json("\"caf\xC3\xA9\"", "doc").get<std::string>(), "caf\xC3\xA9");
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
  EXPECT_NE(parse_error("{\"a\": 1, \"a\": 2}").find("doc.json: duplicate key \"a\""),
            std::string::npos);
  // Per object: the same key in two objects, nested or side by side, is no duplicate.
  EXPECT_NO_THROW(parse_json(R"({"a": {"a": 1, "b": {"a": 2}}, "b": [{"a": 3}, {"a": 4}]})", "d"));
  EXPECT_NE(parse_error(R"({"a": {"b": 1}, "c": {"d": 1, "d": 2}})").find("duplicate key \"d\""),
            std::string::npos);
}

TEST(JsonTest, ErrorNamesSourceLineAndColumn) {
  const std::string e = parse_error("{\n  \"a\": 1,\n  \"b\": ]\n}");
  EXPECT_NE(e.find("doc.json: line 3, column 8"), std::string::npos) << e;
}

TEST(JsonTest, RejectsDeepNesting) {
  EXPECT_NE(parse_error(std::string(200, '[') + std::string(200, ']')).find("nesting"),
            std::string::npos);
  EXPECT_NO_THROW(parse_json(std::string(30, '[') + std::string(30, ']'), "doc"));
  // 64 open containers are allowed, the 65th is not, objects and arrays alike.
  EXPECT_NO_THROW(parse_json(std::string(64, '[') + std::string(64, ']'), "doc"));
  std::string objects;
  for (int i = 0; i < 65; ++i) objects += "{\"k\":";
  objects += "1" + std::string(65, '}');
  EXPECT_NE(parse_error(objects).find("doc.json: nesting deeper than 64"), std::string::npos);
}

TEST(JsonTest, DescribesValuesForMessages) {
  EXPECT_EQ(describe_json(parse_json("12", "d")), "12");
  EXPECT_EQ(describe_json(parse_json("0.5", "d")), "0.5");
  EXPECT_EQ(describe_json(parse_json("\"x\"", "d")), "\"x\"");
  EXPECT_EQ(describe_json(parse_json("[1]", "d")), "an array");
  EXPECT_EQ(describe_json(parse_json("null", "d")), "null");
  EXPECT_EQ(describe_json(parse_json("true", "d")), "true");
  EXPECT_EQ(describe_json(parse_json("{}", "d")), "an object");
  EXPECT_EQ(describe_json(parse_json("9223372036854775808", "d")),
            "9223372036854775808");  // from the double: 2^63 is exact there
  EXPECT_EQ(describe_json(parse_json("\"" + std::string(50, 'x') + "\"", "d")),
            "\"" + std::string(40, 'x') + "...\"");
  EXPECT_STREQ(json_kind(parse_json("[]", "d")), "an array");
  EXPECT_STREQ(json_kind(parse_json("1.5", "d")), "a number");
}

}  // namespace
}  // namespace hsring
