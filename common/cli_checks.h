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
// A section or a key given twice (CLI11 lets the first win silently) and a NUL byte are
// refused too; a UTF-8 byte order mark at the start is skipped. A bare key is a flag set
// to true, as CLI11 reads it.
// A boolean flag's value must be true or false (also 1/0, yes/no, on/off): CLI11 alone
// reads `keep-ring=7` as true.
class CheckedConfig : public CLI::ConfigTOML {
 public:
  explicit CheckedConfig(std::string path) : path_(std::move(path)) {}
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override;
  std::string to_flag(const CLI::ConfigItem& item) const override;

  // CLI11's own message for `error`, when it concerns a value this file gave, with the file
  // and the line in front ("config file F line 4: key 'slots': Value true not in range 2 to
  // 4096"); an unknown key named as one. "" when the error is not about this file's values
  // (`args`: the command line, whose flags win over the file's).
  std::string explain(const CLI::ParseError& error, const std::vector<std::string>& args) const;

 private:
  std::string where() const;
  std::string line_of(const std::string& full_key) const;  // "line N: ", or ""

  std::string path_;  // for messages; "" when unknown
  // "section.key" -> its line, of the file last read (CLI11's interface is const).
  mutable std::map<std::string, size_t> key_lines_;
};

// Throws CLI::ConfigError naming `path` ("" : nothing to check) when it is not a regular
// file this process can read (a FIFO, a folder, a device), or is too large to be a config.
// CLI11 opens the file itself, and would block forever on a FIFO: call this before parsing.
void check_config_file(const std::string& path);

// "" when every line of `text` is well formed (the rules above), else the first problem,
// "line N: ...". With `key_lines`, records the line of each "section.key" read.
std::string config_text_problem(const std::string& text,
                                std::map<std::string, size_t>* key_lines = nullptr);

}  // namespace hsring
