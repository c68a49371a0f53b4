// Strict reading of the small JSON documents the model loader trusts least (config.json,
// safetensors headers, shard indexes, tokenizer files) into nlohmann::json, the one JSON
// value type of the project: duplicate keys and nesting deeper than 64 are refused as well
// as everything RFC 8259 refuses, so a garbage header fails loudly instead of half-parsing.
// Integers stay exact (json_int), never read through a double.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace hsring {

// Parses one JSON document (surrounding whitespace allowed; no comments, no trailing
// text). Throws Error(kModel) "<source>: line L, column C: <what is wrong>", or
// "<source>: duplicate key "k"" / "<source>: nesting deeper than 64".
nlohmann::json parse_json(std::string_view text, const std::string& source);

// The value of an integer literal (no fraction, no exponent) that fits int64: offsets, sizes
// and ids are read through it. nullopt for any other value, 3e2 and 2^63 included.
std::optional<int64_t> json_int(const nlohmann::json& value);

// The member named `key`, or nullptr when absent or when `value` is not an object.
const nlohmann::json* json_member(const nlohmann::json& value, std::string_view key);

// What kind of value it is, for messages: "null", "a boolean", "a number", "a string",
// "an array", "an object".
const char* json_kind(const nlohmann::json& value);

// A short rendering of `value` for error messages: scalars in full, containers by kind.
std::string describe_json(const nlohmann::json& value);

}  // namespace hsring
