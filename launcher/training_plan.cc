#include "launcher/training_plan.h"

#include <fmt/format.h>

#include <ctime>
#include <filesystem>
#include <stdexcept>

#include "checkpoint/checkpoint_reader.h"
#include "common/error.h"
#include "launcher/worker_spec.h"

namespace hsring {

namespace fs = std::filesystem;

namespace {

constexpr char kCheckpointsFolder[] = "checkpoints";
constexpr char kExportFile[] = "drafter.safetensors";
constexpr char kExportFolder[] = "export";
constexpr char kRendezvousFolder[] = "rendezvous";

std::string utc_stamp() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y%m%d-%H%M%S", &utc);
  return text;
}

uint64_t steps_of_this_run(const RunOptions& options, const RingShape& shape) {
  const WorkerSpec drafters = parse_worker_spec(options.drafters, "--drafters");
  return shape.batch_limit == 0 ? 0 : shape.batch_limit / std::max(1u, drafters.count);
}

}  // namespace

void resolve_run_dir(RunOptions& options, bool service) {
  if (!options.run_dir.empty()) return;
  if (service && options.resume.empty()) {
    options.run_dir = "/var/lib/hsring/" + options.ring;
    return;
  }
  if (!options.resume.empty()) {
    options.run_dir = fs::path(options.resume).lexically_normal().parent_path().string();
    if (options.run_dir.empty()) options.run_dir = ".";
    return;
  }
  options.run_dir = "hsring-runs/" + options.ring + "-" + utc_stamp();
}

std::string drafter_objective(const RunOptions& options, bool /*gpu*/) {
  return options.objective != "auto" ? options.objective : "dflash";
}

TrainingPlan training_plan(const RunOptions& options) {
  if (!options.resume.empty() && !options.checkpoint_dir.empty())
    throw Error(Errc::kUsage,
                "give --resume or --checkpoint-dir, not both: a resumed run "
                "continues in the folder it resumes from");
  TrainingPlan plan;
  if (!options.resume.empty())
    plan.checkpoint_dir = options.resume;
  else if (!options.checkpoint_dir.empty())
    plan.checkpoint_dir = options.checkpoint_dir;
  else
    plan.checkpoint_dir = (fs::path(options.run_dir) / kCheckpointsFolder).string();
  plan.export_path = (fs::path(options.run_dir) / kExportFile).string();
  plan.export_dir = (fs::path(options.run_dir) / kExportFolder).string();
  if (options.nnodes > 1)
    plan.rendezvous_dir = !options.rendezvous_dir.empty()
                              ? options.rendezvous_dir
                              : (fs::path(options.run_dir) / kRendezvousFolder).string();
  return plan;
}

void check_multi_node(const RunOptions& options, const WorkerSpec& drafters) {
  if (options.nnodes <= 1) return;
  const std::string what = fmt::format("a run over {} machines", options.nnodes);
  if (!runs_model(options))
    throw Error(Errc::kUsage, what + " trains a drafter: give a --model (not synthetic)");
  if (options.run_dir.empty() && options.resume.empty())
    throw Error(Errc::kUsage, what +
                                  " needs --run-dir on storage every machine sees (the "
                                  "same on each): the checkpoints and the group's "
                                  "rendezvous live there");
  if (drafters.cpu)
    throw Error(Errc::kUsage, what +
                                  " all-reduces with NCCL: give GPU drafters (--drafters "
                                  "with GPU ids); CPU drafters train on one machine only");
}

TrainingPlan prepare_training(const RunOptions& options, const RingShape& shape) {
  TrainingPlan plan = training_plan(options);
  const uint64_t steps = steps_of_this_run(options, shape);
  std::optional<checkpoint::LoadedCheckpoint> loaded;
  try {
    std::error_code ec;
    if (fs::exists(plan.checkpoint_dir, ec)) loaded = checkpoint::load_latest(plan.checkpoint_dir);
  } catch (Error& e) {
    // It keeps its code and class: a damaged or locked folder is the user's to fix (exit 2).
    if (e.layer() == ErrorClass::kCheckpoint)
      e.prepend("checkpoint folder " + plan.checkpoint_dir + ": ");
    throw;
  }
  if (options.resume.empty()) {
    if (loaded && options.node_rank == 0)
      throw Error(Errc::kUsage,
                  "checkpoint folder " + plan.checkpoint_dir +
                      " already holds checkpoints of an earlier run: continue it with "
                      "--resume " +
                      plan.checkpoint_dir + ", or give another --run-dir or --checkpoint-dir");
    plan.total_steps = steps;
    return plan;
  }
  if (!loaded)
    throw Error(Errc::kUsage,
                "--resume " + options.resume +
                    ": no checkpoint there; give the checkpoints folder of an earlier "
                    "run (RUN_DIR/checkpoints)");
  plan.resume_step = loaded->checkpoint.step;
  plan.total_steps = steps == 0 ? 0 : plan.resume_step + steps;
  plan.next_data_batch = loaded->checkpoint.get_u64("data.next_batch").value_or(0);
  return plan;
}

}  // namespace hsring
