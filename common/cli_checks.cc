#include "common/cli_checks.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <map>
#include <sstream>

namespace hsring {

namespace {

constexpr const char* kFiniteCheck = "finite";

std::string trimmed(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t\r");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t\r") - first + 1);
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  return text;
}

// The problem of the value part of `key = value`, or "".
std::string value_problem(const std::string& value) {
  if (value.empty()) return "";
  const char first = value[0];
  if (first == '"' || first == '\'') {
    if (value.compare(0, 3, std::string(3, first)) == 0)
      return "multi-line strings are not supported: put the value on one line";
    size_t close = std::string::npos;
    for (size_t i = 1; i < value.size(); ++i) {
      if (first == '"' && value[i] == '\\') {
        ++i;  // an escaped character, a quote included
        continue;
      }
      if (value[i] == first) {
        close = i;
        break;
      }
    }
    if (close == std::string::npos)
      return std::string("the string has no closing ") + first + ": close it on the same line";
    if (value.find('#', 1) < close)
      return "a '#' inside quotes would be read as the start of a comment: this value cannot "
             "be given in a config file, give it as a flag";
    const std::string rest = trimmed(value.substr(close + 1));
    if (!rest.empty() && rest[0] != '#') return "text after the closing quote: '" + rest + "'";
    return "";
  }
  if (first == '[') {
    const std::string body = trimmed(value.substr(0, value.find('#')));
    if (body.back() != ']') return "the array has no closing ']': close it on the same line";
    return "";
  }
  const std::string body = trimmed(value.substr(0, value.find('#')));
  if (body.find_first_of("\"'") != std::string::npos)
    return "a quote inside an unquoted value: quote the whole value";
  return "";
}

}  // namespace

void refuse_non_finite_numbers(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    if (option->get_type_name().rfind("FLOAT", 0) != 0) continue;
    try {
      option->get_validator(kFiniteCheck);
      continue;  // checked by an earlier call
    } catch (const CLI::OptionNotFound&) {
    }
    // A transform runs before the option's other checks, so "inf" gets this message and
    // not a range check's; it never changes the text.
    option->transform(CLI::Validator(
        [](std::string& text) {
          char* end = nullptr;
          const double value = std::strtod(text.c_str(), &end);
          // Not a number at all: the option's conversion says so. An underflow is finite.
          if (end == text.c_str() || std::isfinite(value)) return std::string();
          return "'" + text + "' is not a finite number";
        },
        "", kFiniteCheck));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    refuse_non_finite_numbers(*sub);
}

std::string config_text_problem(const std::string& text, std::map<std::string, size_t>* key_lines) {
  std::istringstream lines(text);
  std::string line;
  std::string section;
  for (size_t number = 1; std::getline(lines, line); ++number) {
    const std::string content = trimmed(line);
    if (content.empty() || content[0] == '#') continue;
    const std::string at = "line " + std::to_string(number) + ": ";
    if (content[0] == '[') {
      const std::string header = trimmed(content.substr(0, content.find('#')));
      if (header.back() != ']') return at + "the section '" + header + "' has no closing ']'";
      section = trimmed(header.substr(1, header.find(']') - 1));
      continue;
    }
    const size_t equals = content.find('=');
    if (equals == std::string::npos) continue;  // CLI11 reads a bare key as a set flag
    const std::string key = trimmed(content.substr(0, equals));
    if (key_lines) (*key_lines)[section.empty() ? key : section + "." + key] = number;
    if (std::string why = value_problem(trimmed(content.substr(equals + 1))); !why.empty())
      return at + "key '" + key + "': " + why;
  }
  return "";
}

std::vector<CLI::ConfigItem> CheckedConfig::from_config(std::istream& input) const {
  const std::string text{std::istreambuf_iterator<char>(input), std::istreambuf_iterator<char>()};
  key_lines_.clear();
  if (std::string why = config_text_problem(text, &key_lines_); !why.empty())
    throw CLI::ConfigError(where() + why);
  std::istringstream again(text);
  return CLI::ConfigTOML::from_config(again);
}

std::string CheckedConfig::to_flag(const CLI::ConfigItem& item) const {
  const std::string value = CLI::ConfigTOML::to_flag(item);
  static const char* const kBooleans[] = {"true", "false", "1", "0", "yes", "no", "on", "off"};
  const std::string spelled = lower(value);
  for (const char* boolean : kBooleans)
    if (spelled == boolean) return value;
  const auto line = key_lines_.find(item.fullname());
  throw CLI::ConfigError(
      where() + (line == key_lines_.end() ? "" : "line " + std::to_string(line->second) + ": ") +
      "key '" + item.name + "': '" + value + "' is not a boolean: give true or false");
}

std::string CheckedConfig::where() const {
  return "config file " + (path_.empty() ? std::string() : path_ + " ");
}

}  // namespace hsring
