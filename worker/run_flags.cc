#include "worker/run_flags.h"

#include <CLI/CLI.hpp>
#include <charconv>
#include <type_traits>

#include "common/cli_checks.h"
#include "shm/ring.h"
#include "worker/profile_interval.h"

namespace hsring {

namespace {

const RunOptions& defaults() {
  static const RunOptions options;
  return options;
}

std::vector<std::string> choices_of(std::string_view text) {
  std::vector<std::string> choices;
  for (size_t start = 0; start <= text.size();) {
    const size_t end = std::min(text.find('|', start), text.size());
    choices.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return choices;
}

template <class T>
void add_check(CLI::Option& option, const FlagCheck& check) {
  using Kind = FlagCheck::Kind;
  switch (check.kind) {
    case Kind::kNone:
      return;
    case Kind::kRange:
      // In the field's type, as CLI::Range(2u, 64u) would be: its message prints the bounds
      // as that type does.
      if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>)
        option.check(CLI::Range(T(check.min), T(check.max)));
      return;
    case Kind::kPositive:
      option.check(CLI::PositiveNumber);
      return;
    case Kind::kNonNegative:
      option.check(CLI::NonNegativeNumber);
      return;
    case Kind::kChoices:
      option.check(CLI::IsMember(choices_of(check.choices)));
      return;
    case Kind::kRingName:
      option.check(ring_name_check());
      return;
    case Kind::kProfileInterval:
      option.check(profile_interval_check());
      return;
  }
}

template <class T>
void add_option(CLI::App& app, const RunFlag& flag, uint8_t program, T& value,
                const T& default_value) {
  std::string name(flag_name(flag, program));
  if (program == kLauncher && !flag.alias.empty()) name += "," + std::string(flag.alias);
  const std::string help(flag.help);
  if constexpr (std::is_same_v<T, bool>) {
    // A field that defaults to true is what its --no-... flag switches off.
    app.add_flag((default_value ? "!" : "") + name, value, help);
  } else {
    CLI::Option* option = app.add_option(name, value, help)->capture_default_str();
    add_check<T>(*option, flag.check);
  }
}

// Whether the launcher passes `flag` in a run of `options` to a worker on a GPU (gpu) or
// not.
bool passed_in(const RunFlag& flag, const RunOptions& options, bool gpu) {
  switch (flag.passed) {
    case Passed::kEveryRun:
      return true;
    case Passed::kModelRun:
      return runs_model(options);
    case Passed::kDflashRun:  // "auto" is DFlash too (training_plan.h, drafter_objective)
      return runs_model(options) && options.objective != "same-position";
    case Passed::kGpuWorker:
      return gpu;
  }
  return false;
}

bool at_default(const RunOptions& options, const RunFlag& flag) {
  return std::visit([&](auto member) { return options.*member == defaults().*member; }, flag.field);
}

std::string text_of(bool) { return ""; }
std::string text_of(const std::string& value) { return value; }
template <class T>
std::string text_of(T value) {
  // The shortest text that parses back to the same value (std::to_string keeps 6 decimals).
  char text[64];
  const auto [end, error] = std::to_chars(text, text + sizeof text, value);
  return std::string(text, error == std::errc() ? end : text);
}

}  // namespace

void add_flags_of(CLI::App& app, RunOptions& options, uint8_t program) {
  for (const RunFlag& flag : run_flags()) {
    if ((flag.reach & program) == 0) continue;
    std::visit(
        [&](auto member) { add_option(app, flag, program, options.*member, defaults().*member); },
        flag.field);
  }
  refuse_non_finite_numbers(app);
}

std::vector<std::string> run_flag_argv(const RunOptions& options, Role role, bool gpu) {
  const uint8_t program = role == Role::kTarget ? kTargets : kDrafters;
  std::vector<std::string> argv;
  for (const RunFlag& flag : run_flags()) {
    if ((flag.reach & program) == 0 || !passed_in(flag, options, gpu)) continue;
    if (!flag.always && at_default(options, flag)) continue;
    argv.emplace_back(flag_name(flag, program));
    if (!std::holds_alternative<bool RunOptions::*>(flag.field))
      argv.push_back(flag_value_text(options, flag));
  }
  return argv;
}

std::vector<std::pair<std::string, std::string>> run_flag_environment(const RunOptions& options,
                                                                      Role role, bool gpu) {
  const uint8_t program = role == Role::kTarget ? kTargets : kDrafters;
  std::vector<std::pair<std::string, std::string>> env;
  for (const RunFlag& flag : run_flags()) {
    if (flag.env.empty() || (flag.reach & program) == 0 || !passed_in(flag, options, gpu)) continue;
    std::string value = flag_value_text(options, flag);
    if (value.empty()) continue;  // an empty string flag, which a user command reads as unset
    env.emplace_back(flag.env, std::move(value));
  }
  return env;
}

std::string flag_value_text(const RunOptions& options, const RunFlag& flag) {
  return std::visit([&](auto member) { return text_of(options.*member); }, flag.field);
}

CLI::Validator ring_name_check() {
  return CLI::Validator([](std::string& name) { return ring_name_problem(name); }, "");
}

}  // namespace hsring
