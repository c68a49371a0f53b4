// Values for the flag tests, derived from a row of the flag table (worker/run_flags.h), so
// a new row is tested without a line of test: one value its check accepts that is not the
// default, and one its check refuses.
#pragma once

#include <charconv>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "worker/run_flags.h"

namespace hsring::testing {

inline bool is_bool(const RunFlag& flag) {
  return std::holds_alternative<bool RunOptions::*>(flag.field);
}
inline bool is_text(const RunFlag& flag) {
  return std::holds_alternative<std::string RunOptions::*>(flag.field);
}
inline bool is_floating(const RunFlag& flag) {
  return std::holds_alternative<double RunOptions::*>(flag.field);
}

// `value` as the flag's type writes it: an integer, or a double's shortest exact text.
inline std::string number_text(const RunFlag& flag, double value) {
  if (!is_floating(flag)) return std::to_string(int64_t(value));
  char text[64];
  return std::string(text, std::to_chars(text, text + sizeof text, value).ptr);
}

// Text of a value `flag`'s check accepts and that is not its default; "" for a bool, whose
// flag alone sets the other value.
inline std::string accepted_text(const RunFlag& flag) {
  if (is_bool(flag)) return "";
  const std::string fallback = flag_value_text(RunOptions{}, flag);
  const auto other_than_default = [&](std::string a, std::string b) {
    return a != fallback ? a : b;
  };
  const FlagCheck& c = flag.check;
  switch (c.kind) {
    case FlagCheck::Kind::kRange:
      return other_than_default(number_text(flag, c.max), number_text(flag, c.min));
    case FlagCheck::Kind::kPositive:
    case FlagCheck::Kind::kNonNegative:
      return other_than_default("0.3", "0.7");
    case FlagCheck::Kind::kChoices: {
      const std::string first(c.choices.substr(0, c.choices.find('|')));
      const std::string rest(c.choices.substr(c.choices.find('|') + 1));
      return other_than_default(first, rest.substr(0, rest.find('|')));
    }
    case FlagCheck::Kind::kRingName:
      return "flag-test-ring";
    case FlagCheck::Kind::kProfileInterval:
      return "0.25";
    case FlagCheck::Kind::kNone:
      break;
  }
  if (is_text(flag)) return "some/value";
  // Unchecked numbers: 7 more than the default (0.3 more for a double: not exact in binary).
  return number_text(flag, std::stod(fallback) + (is_floating(flag) ? 0.3 : 7));
}

// Text of a value `flag`'s check refuses; nullopt when it checks nothing.
inline std::optional<std::string> refused_text(const RunFlag& flag) {
  const FlagCheck& c = flag.check;
  switch (c.kind) {
    case FlagCheck::Kind::kRange:
      return number_text(flag, is_floating(flag) ? c.max * 2 + 1 : c.max + 1);
    case FlagCheck::Kind::kPositive:
      return "0";
    case FlagCheck::Kind::kNonNegative:
      return "-1";
    case FlagCheck::Kind::kChoices:
      return "not-a-choice";
    case FlagCheck::Kind::kRingName:
      return "../ring";
    case FlagCheck::Kind::kProfileInterval:
      return "-1";
    case FlagCheck::Kind::kNone:
      break;
  }
  return std::nullopt;
}

// The flag and its value as a command line gives them: {name} for a bool.
inline std::vector<std::string> given(std::string_view name, const std::string& value) {
  std::vector<std::string> args = {std::string(name)};
  if (!value.empty()) args.push_back(value);
  return args;
}

}  // namespace hsring::testing
