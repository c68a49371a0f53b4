// The flag table (worker/run_flags.h) as properties over its rows, so a new flag is covered
// without a new test: every flag a worker gets reaches it with the value the launcher read,
// a flag at its default is left out, every check refuses the same value on every side, and
// each program's help lists each of its flags once.
#include "worker/run_flags.h"

#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <map>
#include <sstream>

#include "tests/worker/flag_values.h"

namespace hsring {
namespace {

using testing::accepted_text;
using testing::given;
using testing::refused_text;

constexpr uint8_t kPrograms[] = {kLauncher, kTargets, kDrafters};

const char* program_name(uint8_t program) {
  return program == kLauncher  ? "hsring run"
         : program == kTargets ? "hsring-target"
                               : "hsring-drafter";
}

uint8_t program_of(Role role) { return role == Role::kTarget ? kTargets : kDrafters; }

// `args` (the program's name left out) through `program`'s parser, made from the table.
RunOptions parsed_by(uint8_t program, std::vector<std::string> args) {
  CLI::App app;
  RunOptions options;
  add_flags_of(app, options, program);
  std::reverse(args.begin(), args.end());  // CLI11 takes a vector back to front
  app.parse(args);
  return options;
}

bool same_value(const RunOptions& a, const RunOptions& b, const RunFlag& flag) {
  return std::visit([&](auto member) { return a.*member == b.*member; }, flag.field);
}

// Every field a worker of `program` parses holds the same value in `a` and `b`.
void expect_same_for(uint8_t program, const RunOptions& a, const RunOptions& b) {
  for (const RunFlag& other : run_flags()) {
    if ((other.reach & program) == 0) continue;
    EXPECT_TRUE(same_value(a, b, other)) << other.name << ": " << flag_value_text(a, other)
                                         << " became " << flag_value_text(b, other);
  }
}

TEST(RunFlagsTest, EveryFlagAWorkerGetsArrivesWithTheValueTheLauncherRead) {
  for (const RunFlag& flag : run_flags()) {
    for (const Role role : {Role::kTarget, Role::kDrafter}) {
      const uint8_t program = program_of(role);
      if ((flag.reach & program) == 0) continue;
      const std::string value = accepted_text(flag);
      SCOPED_TRACE(std::string(flag.name) + " '" + value + "' to " + program_name(program));
      // The launcher reads it from its command line; a flag of the workers only, the
      // launcher sets itself (here: as the worker would read it).
      const RunOptions sent = (flag.reach & kLauncher) != 0
                                  ? parsed_by(kLauncher, given(flag.name, value))
                                  : parsed_by(program, given(flag_name(flag, program), value));
      ASSERT_FALSE(same_value(sent, RunOptions{}, flag)) << "the sample is the default";
      // A GPU worker of a model run: every flag is passed in some run like it.
      const RunOptions received = parsed_by(program, run_flag_argv(sent, role, /*gpu=*/true));
      expect_same_for(program, sent, received);
    }
  }
}

TEST(RunFlagsTest, AFlagAtItsDefaultIsLeftOutAndTheWorkerHasTheSameDefault) {
  const RunOptions defaults;
  for (const Role role : {Role::kTarget, Role::kDrafter}) {
    const uint8_t program = program_of(role);
    for (const bool gpu : {false, true}) {
      const std::vector<std::string> argv = run_flag_argv(defaults, role, gpu);
      for (const RunFlag& flag : run_flags()) {
        const bool listed =
            std::find(argv.begin(), argv.end(), flag_name(flag, program)) != argv.end();
        EXPECT_EQ(listed, flag.always && (flag.reach & program) != 0) << flag.name;
      }
      expect_same_for(program, defaults, parsed_by(program, argv));
    }
  }
}

// A CPU worker gets no GPU flag; a synthetic run's workers get nothing of a model's; a
// same-position drafter nothing of DFlash's.
TEST(RunFlagsTest, AWorkerGetsOnlyTheFlagsOfItsKindOfRun) {
  RunOptions o;
  o.target_publish = "early";
  o.noise_std = 0.5;
  o.loss_gamma = 5;
  o.model_seed = 3;
  o.target_rate = 2;
  const auto has = [](const std::vector<std::string>& argv, const char* flag) {
    return std::find(argv.begin(), argv.end(), flag) != argv.end();
  };
  EXPECT_TRUE(has(run_flag_argv(o, Role::kTarget, true), "--publish"));
  EXPECT_FALSE(has(run_flag_argv(o, Role::kTarget, false), "--publish"));
  EXPECT_TRUE(has(run_flag_argv(o, Role::kDrafter, true), "--noise-std"));
  EXPECT_FALSE(has(run_flag_argv(o, Role::kDrafter, false), "--noise-std"));
  EXPECT_TRUE(has(run_flag_argv(o, Role::kDrafter, false), "--loss-gamma"));
  o.objective = "same-position";
  EXPECT_FALSE(has(run_flag_argv(o, Role::kDrafter, false), "--loss-gamma"));
  o.model = "synthetic";
  for (const Role role : {Role::kTarget, Role::kDrafter}) {
    EXPECT_FALSE(has(run_flag_argv(o, role, false), "--model"));
    EXPECT_FALSE(has(run_flag_argv(o, role, false), "--model-seed"));
  }
  EXPECT_TRUE(has(run_flag_argv(o, Role::kTarget, false), "--rate")) << "every run's";
}

// The check is the table's: where the launcher refuses a value, every worker that gets the
// flag refuses it too (the drafter once took any --anchors the launcher bounds).
TEST(RunFlagsTest, EveryCheckRefusesTheSameValueInEveryProgramThatParsesTheFlag) {
  size_t checked = 0;
  for (const RunFlag& flag : run_flags()) {
    const std::optional<std::string> bad = refused_text(flag);
    if (!bad) continue;
    for (const uint8_t program : kPrograms) {
      if ((flag.reach & program) == 0) continue;
      SCOPED_TRACE(std::string(flag_name(flag, program)) + " '" + *bad + "' to " +
                   program_name(program));
      EXPECT_THROW(parsed_by(program, given(flag_name(flag, program), *bad)), CLI::ParseError);
      EXPECT_NO_THROW(parsed_by(program, given(flag_name(flag, program), accepted_text(flag))));
      ++checked;
    }
  }
  EXPECT_GT(checked, 50u);
  EXPECT_THROW(parsed_by(kDrafters, {"--anchors", "2000000"}), CLI::ValidationError);
}

// The flags a program's --help lists: the first word of each option line, split at commas.
std::map<std::string, int> listed_flags(const std::string& help) {
  std::map<std::string, int> listed;
  std::istringstream lines(help);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t start = line.find_first_not_of(' ');
    if (start == std::string::npos || start > 2 || line[start] != '-') continue;
    std::string names = line.substr(start, line.find(' ', start) - start);
    names = names.substr(0, names.find('{'));  // "--no-eval{false}": a negated flag
    std::istringstream parts(names);
    for (std::string name; std::getline(parts, name, ',');) ++listed[name];
  }
  return listed;
}

TEST(RunFlagsTest, EachProgramsHelpListsEachOfItsFlagsOnce) {
  for (const uint8_t program : kPrograms) {
    SCOPED_TRACE(program_name(program));
    CLI::App app;
    RunOptions options;
    add_flags_of(app, options, program);
    const std::string help = app.help();
    std::map<std::string, int> listed = listed_flags(help);
    listed.erase("-h");
    listed.erase("--help");
    std::map<std::string, int> expected;
    for (const RunFlag& flag : run_flags()) {
      if ((flag.reach & program) == 0) continue;
      ++expected[std::string(flag_name(flag, program))];
      if (program == kLauncher && !flag.alias.empty()) ++expected[std::string(flag.alias)];
      EXPECT_NE(help.find(std::string(flag.help)), std::string::npos) << flag.name << ": its help";
    }
    EXPECT_EQ(listed, expected);
    for (const auto& [name, count] : expected) EXPECT_EQ(count, 1) << name << " declared twice";
  }
}

}  // namespace
}  // namespace hsring
