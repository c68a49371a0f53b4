// Every command line the launcher writes for a worker, in every kind of run, is one the
// worker's own parser (made from the same flag table) reads back to the values the launcher
// resolved for it (resolve_worker_options): nothing lost, nothing refused.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <algorithm>

#include "launcher/worker_command.h"
#include "worker/run_flags.h"
#include "worker/worker_main.h"

namespace hsring {
namespace {

struct Parsed {
  RunOptions run;
  std::vector<std::string> place;  // --index and --gpu, which worker_main adds
};

// `argv` without its program, as worker_main would parse it for `role`.
Parsed parse_as_worker(std::vector<std::string> argv, Role role) {
  CLI::App app;
  Parsed parsed;
  add_flags_of(app, parsed.run, role == Role::kTarget ? kTargets : kDrafters);
  uint32_t index = 0;
  int gpu = -1;
  app.add_option("--index", index);
  app.add_option("--gpu", gpu);
  argv.erase(argv.begin());
  std::reverse(argv.begin(), argv.end());  // CLI11 takes a vector back to front
  app.parse(argv);
  parsed.place = worker_place_argv(index, gpu);
  return parsed;
}

TEST(WorkerArgvTest, EveryWorkerReadsBackWhatTheLauncherResolvedForIt) {
  size_t runs = 0;
  for (const char* model : {"synthetic", "tiny"}) {
    for (const char* objective : {"auto", "same-position"}) {
      for (const uint32_t nnodes : {1u, 3u}) {
        RunOptions o;
        o.model = model;
        o.objective = objective;
        o.nnodes = nnodes;
        o.node_rank = nnodes - 1;
        o.run_dir = "/runs/r1";
        o.total_steps = 10;  // shorter than the warmup: it is cut to the run
        o.eval_every = 5;
        o.eval_data = "/data/held-out";
        o.loss_gamma = 3.5;
        o.target_rate = 0.25;
        o.drafter_step_ms = 1.5;
        o.noise_schedule = "linear:0.1,0,100";
        for (const Role role : {Role::kTarget, Role::kDrafter}) {
          for (const int gpu : {-1, 2}) {
            SCOPED_TRACE(std::string(model) + " " + objective + " nnodes " +
                         std::to_string(nnodes) + " " + to_string(role) + " gpu " +
                         std::to_string(gpu));
            const std::vector<std::string> argv = worker_argv(o, role, 1, gpu, "/bin");
            const Parsed parsed = parse_as_worker(argv, role);
            EXPECT_EQ(parsed.place, worker_place_argv(1, gpu));
            const RunOptions resolved = resolve_worker_options(o, role, gpu >= 0);
            const uint8_t program = role == Role::kTarget ? kTargets : kDrafters;
            for (const RunFlag& flag : run_flags()) {
              if ((flag.reach & program) == 0) continue;
              const std::string want = flag_value_text(resolved, flag);
              const std::string got = flag_value_text(parsed.run, flag);
              // What the run does not pass its workers stays at the default.
              const bool passed =
                  std::find(argv.begin(), argv.end(), flag_name(flag, program)) != argv.end();
              EXPECT_EQ(got, passed ? want : flag_value_text(RunOptions{}, flag)) << flag.name;
            }
            ++runs;
          }
        }
      }
    }
  }
  EXPECT_EQ(runs, 32u);
}

// What the launcher resolves for its drafters, once, for every kind of drafter.
TEST(WorkerArgvTest, TheLauncherResolvesTheDraftersTrainingPlan) {
  RunOptions o;
  o.model = "tiny";
  o.run_dir = "/runs/r1";
  o.total_steps = 10;
  const RunOptions dflash = resolve_worker_options(o, Role::kDrafter, false);
  EXPECT_EQ(dflash.objective, "dflash");
  EXPECT_EQ(dflash.drafter_export, "/runs/r1/export");
  EXPECT_EQ(dflash.checkpoint_dir, "/runs/r1/checkpoints");
  EXPECT_EQ(dflash.warmup_steps, 10u) << "a run shorter than the warmup warms up over it";
  EXPECT_EQ(dflash.eval_every, 0u) << "no held-out data was resolved";
  o.objective = "same-position";
  EXPECT_EQ(resolve_worker_options(o, Role::kDrafter, true).drafter_export,
            "/runs/r1/drafter.safetensors");
  EXPECT_EQ(resolve_worker_options(o, Role::kTarget, false).checkpoint_dir, "")
      << "targets keep no checkpoints";
}

}  // namespace
}  // namespace hsring
