#include "common/cli_checks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <sstream>

#include "common/error.h"
#include "common/regular_file.h"

namespace hsring {

namespace {

constexpr const char* kFiniteCheck = "finite";
constexpr const char* kUtf8Bom = "\xEF\xBB\xBF";
// A config file is a screenful of lines; a larger file is not one.
constexpr size_t kMaxConfigBytes = 1u << 20;

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
  // Where each section and "section.key" was first given: CLI11 lets the first of two win
  // silently, so a second one is refused instead.
  std::map<std::string, size_t> section_lines, keys;
  for (size_t number = 1; std::getline(lines, line); ++number) {
    const std::string at = fmt::format("line {}: ", number);
    if (line.find('\0') != std::string::npos)
      return at + "a NUL byte: a config file is text; is this the right file?";
    const std::string content = trimmed(line);
    if (content.empty() || content[0] == '#') continue;
    if (content[0] == '[') {
      const std::string header = trimmed(content.substr(0, content.find('#')));
      if (header.back() != ']') return at + "the section '" + header + "' has no closing ']'";
      section = trimmed(header.substr(1, header.find(']') - 1));
      const auto [first, fresh] = section_lines.emplace(section, number);
      if (!fresh)
        return fmt::format("{}the section [{}] again (first at line {}): give each section once",
                           at, section, first->second);
      continue;
    }
    // A bare key is CLI11's "KEY = true" (a flag); explain_config_error names its line.
    const size_t equals = content.find('=');
    const std::string key =
        trimmed(equals == std::string::npos ? content.substr(0, content.find('#'))
                                            : content.substr(0, equals));
    const std::string full = section.empty() ? key : section + "." + key;
    const auto [first, fresh] = keys.emplace(full, number);
    if (!fresh)
      return fmt::format("{}key '{}' again (first at line {}): give each key once", at, key,
                         first->second);
    if (key_lines) (*key_lines)[full] = number;
    if (equals == std::string::npos) continue;
    if (std::string why = value_problem(trimmed(content.substr(equals + 1))); !why.empty())
      return at + "key '" + key + "': " + why;
  }
  return "";
}

std::vector<CLI::ConfigItem> CheckedConfig::from_config(std::istream& input) const {
  std::string text{std::istreambuf_iterator<char>(input), std::istreambuf_iterator<char>()};
  // A UTF-8 byte order mark, as some Windows editors write, is no part of the first line.
  if (text.rfind(kUtf8Bom, 0) == 0) text.erase(0, std::strlen(kUtf8Bom));
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
  throw CLI::ConfigError(where() + line_of(item.fullname()) + "key '" + item.name + "': '" + value +
                         "' is not a boolean: give true or false");
}

void check_config_file(const std::string& path) {
  if (path.empty()) return;
  try {
    (void)read_regular_file(path, Errc::kUsage, kMaxConfigBytes);
  } catch (const Error& e) {
    throw CLI::ConfigError(std::string("config file ") + e.what());
  }
}

std::string CheckedConfig::explain(const CLI::ParseError& error,
                                   const std::vector<std::string>& args) const {
  const std::string what = error.what();
  // CLI11's "INI was not able to parse SECTION.KEY": a key no command has.
  const std::string extras = "INI was not able to parse ";
  if (what.rfind(extras, 0) == 0) {
    const std::string full = what.substr(extras.size());
    return where() + line_of(full) + "unknown key '" + full.substr(full.find('.') + 1) +
           "': `hsring config default` lists the keys ([run] section)";
  }
  // "--KEY: ..." about an option the command line did not give: its value came from here.
  if (what.rfind("--", 0) != 0 || what.find(':') == std::string::npos) return "";
  const std::string flag = what.substr(0, what.find(':'));
  for (const std::string& arg : args)
    if (arg == flag || arg.rfind(flag + "=", 0) == 0) return "";
  const std::string key = flag.substr(2);
  for (const auto& [full, line] : key_lines_) {
    if (full != key &&
        (full.size() <= key.size() ||
         full.compare(full.size() - key.size() - 1, std::string::npos, "." + key) != 0))
      continue;
    return fmt::format("{}line {}: key '{}': {}", where(), line, key, what.substr(flag.size() + 2));
  }
  return "";
}

std::string CheckedConfig::line_of(const std::string& full_key) const {
  const auto line = key_lines_.find(full_key);
  return line == key_lines_.end() ? "" : fmt::format("line {}: ", line->second);
}

std::string CheckedConfig::where() const {
  return "config file " + (path_.empty() ? std::string() : path_ + " ");
}

}  // namespace hsring
