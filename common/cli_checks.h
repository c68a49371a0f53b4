// Checks every command line and config file of hsring shares: no floating-point flag takes
// a value that is not finite, and a config file (TOML/INI through CLI11) is refused, with
// its line, where CLI11 would read something other than what it says.
#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <memory>
#include <string>

namespace hsring {

// Adds, in front of their own checks, a check to every floating-point option of `app` and
// of its subcommands defined so far: "nan", "inf" or a value that overflows to infinity is
// refused with "--FLAG: 'nan' is not a finite number". CLI11's range checks let NaN pass
// (every comparison with it is false), and a NaN learning rate or run time fails much
// later, or silently. Call it after the options are added.
void refuse_non_finite_numbers(CLI::App& app);

// CLI11's TOML reader, stricter: before CLI11 reads `path`'s text, every line is checked
// and a malformed one refused with CLI::ConfigError naming the file, the line and the key:
//  - a string without its closing quote, text after the closing quote, or a '#' inside
//    quotes (CLI11 2.1 cuts the line there as a comment);
//  - a multi-line string, an array without its ']', a section without its ']';
//  - a quote in an unquoted value.
// A boolean flag's value must be true or false (also 1/0, yes/no, on/off): CLI11 alone
// reads `keep-ring=7` as true.
class CheckedConfig : public CLI::ConfigTOML {
 public:
  explicit CheckedConfig(std::string path) : path_(std::move(path)) {}
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override;
  std::string to_flag(const CLI::ConfigItem& item) const override;

 private:
  std::string where() const;

  std::string path_;  // for messages; "" when unknown
  // "section.key" -> its line, of the file last read (CLI11's interface is const).
  mutable std::map<std::string, size_t> key_lines_;
};

// "" when every line of `text` is well formed (the rules above), else the first problem,
// "line N: ...". With `key_lines`, records the line of each "section.key" read.
std::string config_text_problem(const std::string& text,
                                std::map<std::string, size_t>* key_lines = nullptr);

}  // namespace hsring
