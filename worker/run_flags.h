// Each flag of a run declared once. One table (worker/run_flag_table.cc) gives every
// `hsring run` flag its field of RunOptions, its check, its help and the workers it
// reaches; from it come the launcher's CLI11 options, the argv the launcher gives each
// worker, and each worker program's CLI11 parser, so both sides read a flag with the same
// check into the same field, whose initializer (worker/run_options.h) is the default
// everywhere. A worker program's own flags that the launcher never passes (--threads,
// --seed, test hooks) stay in that program's main.cc.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "shm/ring_layout.h"
#include "worker/run_options.h"

// CLI11 is declared, not included: its header costs seconds of compile time in every
// file that includes it, and only the files that build a command line use it.
namespace CLI {
class App;
class Validator;
}  // namespace CLI

namespace hsring {

// The programs that parse a flag (RunFlag::reach, a bit set).
inline constexpr uint8_t kLauncher = 1;  // `hsring run` and its config file's [run] section
inline constexpr uint8_t kTargets = 2;   // hsring-target
inline constexpr uint8_t kDrafters = 4;  // hsring-drafter
inline constexpr uint8_t kWorkers = kTargets | kDrafters;
inline constexpr uint8_t kEveryProgram = kLauncher | kWorkers;

// Which runs' workers the launcher passes a flag to; the worker programs parse it always.
enum class Passed : uint8_t {
  kEveryRun,
  kModelRun,   // the targets run a model (runs_model), the drafters train
  kDflashRun,  // the drafters train the DFlash objective
  kGpuWorker,  // the worker runs on a GPU
};

// What a value must be; the same CLI11 check on every program that parses the flag.
struct FlagCheck {
  enum class Kind : uint8_t {
    kNone,
    kRange,            // min <= value <= max, compared in the field's own type
    kPositive,         // > 0 (CLI::PositiveNumber)
    kNonNegative,      // >= 0 (CLI::NonNegativeNumber)
    kChoices,          // one of `choices`, separated by '|'
    kRingName,         // ring_name_check()
    kProfileInterval,  // profile_interval_check() (worker/profile_interval.h)
  };
  Kind kind = Kind::kNone;
  double min = 0, max = 0;
  std::string_view choices;
};
constexpr FlagCheck range(double min, double max) { return {FlagCheck::Kind::kRange, min, max}; }
constexpr FlagCheck positive() { return {FlagCheck::Kind::kPositive}; }
constexpr FlagCheck non_negative() { return {FlagCheck::Kind::kNonNegative}; }
constexpr FlagCheck one_of(std::string_view choices) {
  return {FlagCheck::Kind::kChoices, 0, 0, choices};
}

using RunField =
    std::variant<bool RunOptions::*, uint32_t RunOptions::*, uint64_t RunOptions::*,
                 int64_t RunOptions::*, double RunOptions::*, std::string RunOptions::*>;

// One row of the table. A bool field is a flag without a value: it sets the field to the
// opposite of its default (so a field that defaults to true has a --no-... flag).
struct RunFlag {
  std::string_view name;  // as `hsring run` spells it; the config file's key without "--"
  RunField field;
  uint8_t reach = kLauncher;
  FlagCheck check = {};
  std::string_view help;
  Passed passed = Passed::kEveryRun;
  // Passed even at its default value. Otherwise the launcher leaves out a flag whose value
  // is the default, which the worker then has too.
  bool always = false;
  std::string_view worker_name = {};  // the workers' name, when it is not `name`
  std::string_view alias = {};        // a short form, launcher only ("-q")
  // The environment variable that gives the flag's value to a worker that is a user command
  // (--target-cmd, --drafter-cmd: python/hsring's from_env() reads it), "" when none does.
  std::string_view env = {};
};

// Every flag, in the order of `hsring run --help`.
std::span<const RunFlag> run_flags();

// The name under which `program` (one bit of kLauncher, kTargets, kDrafters) parses `flag`.
constexpr std::string_view flag_name(const RunFlag& flag, uint8_t program) {
  return program == kLauncher || flag.worker_name.empty() ? flag.name : flag.worker_name;
}

// Adds every flag that reaches `program` to `app`, read into `options`, with its check and
// help; every floating-point one also refuses a value that is not finite
// (refuse_non_finite_numbers). kLauncher gives `hsring run`'s flags.
void add_flags_of(CLI::App& app, RunOptions& options, uint8_t program);
inline void add_run_flags(CLI::App& app, RunOptions& options) {
  add_flags_of(app, options, kLauncher);
}

// The flags the launcher gives a worker of `role` (on a GPU when `gpu`), from `options` as
// resolved for the workers: each flag that reaches the role, in a run it is passed in,
// whose value differs from its default (or is passed always), as the worker parses it.
std::vector<std::string> run_flag_argv(const RunOptions& options, Role role, bool gpu);

// The variables a user-command worker of `role` (on a GPU when `gpu`) gets from the flags:
// each flag with an `env` name that reaches the role, in a run it is passed in (the same
// rules as run_flag_argv), at its value whatever it is (a user command knows no defaults),
// as flag_value_text writes it; a string flag left empty is left out.
std::vector<std::pair<std::string, std::string>> run_flag_environment(const RunOptions& options,
                                                                      Role role, bool gpu);

// The text of `flag`'s value in `options`, as a worker parses it back to the same value
// (doubles in their shortest exact form); "" for a bool (a flag has no value).
std::string flag_value_text(const RunOptions& options, const RunFlag& flag);

// A CLI11 check of a ring name: ring_name_problem()'s reason, after the flag's name.
CLI::Validator ring_name_check();

}  // namespace hsring
