// End-to-end drafter training through `hsring run` with the tiny target on the built-in
// corpus: the loss falls; a SIGKILLed drafter resumes from its last checkpoint and its
// step count continues from there, its curves (metrics.jsonl) too; --resume continues a finished
// run's curve; damaged checkpoints are skipped with a warning, and a folder with none valid stops
// the run instead of silently training from zero.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "tests/crash/launcher_fixture.h"

namespace hsring {
namespace {

using namespace launcher_testing;
using crash::Millis;
using crash::WorkerProcess;
namespace fs = std::filesystem;

constexpr Millis kTrainingLimit(400000);  // a short training run, even under ASan

// Small batches keep a step short on a loaded 2-core machine. These tests are about the
// training machinery (checkpoints, resume, groups), shared by both objectives: they train
// the same-position one, whose loss falls fastest; the DFlash one is the default job's
// (TheDefaultJobTrainsADrafterThatDrafts).
std::vector<std::string> training_flags(const std::string& batches) {
  return {"--model", "tiny", "--objective", "same-position", "--max-tokens",   "128",
          "--slots", "8",    "--batches",   batches,         "--max-restarts", "100",
          "--quiet"};
}

std::vector<std::string> checkpoints_in(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.path().extension() == ".hsckpt") files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

// The steps of RUN_DIR/metrics.jsonl (curves/training_curves.h), in file order.
std::vector<uint64_t> curve_steps(const std::string& run_dir) {
  std::vector<uint64_t> steps;
  std::ifstream in(run_dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);)
    steps.push_back(nlohmann::json::parse(line).at("step").get<uint64_t>());
  return steps;
}

std::vector<uint64_t> one_to(uint64_t n) {
  std::vector<uint64_t> steps(n);
  for (uint64_t i = 0; i < n; ++i) steps[i] = i + 1;
  return steps;
}

class TrainingRunTest : public LauncherTest {
 protected:
  std::string checkpoints() const { return run_dir() + "/checkpoints"; }
};

// The README's main job as it is: the built-in trained target over its own continuations of
// the built-in corpus (the built-in data), a DFlash drafter trained on the CPU for its
// default 200 batches, exported as a DFlash folder, then decoded speculatively on the 63
// held-out prompts. It must draft: well past the untrained drafter's acceptance length (1
// token per target forward; 1.90 - 3.04 over seven runs on two cores, each with a 95%
// interval of about +-0.2, bench/RESULTS.md), output identical to greedy decoding.
TEST_F(TrainingRunTest, TheDefaultJobTrainsADrafterThatDrafts) {
  const std::vector<std::string> argv = {hsring(),    "run",     "--ring",         ring_,
                                         "--run-dir", run_dir(), "--summary-json", summary_path(),
                                         "--quiet"};
  launcher_ =
      std::make_unique<crash::Spawned>(argv, dir_.file("launcher.out"), dir_.file("launcher.err"));
  ASSERT_EQ(wait_launcher(kTrainingLimit), 0) << launcher_->stderr_text();
  expect_data_intact();
  EXPECT_EQ(summary("steps"), 200);
  const double trained = summary("acceptance_length");
  const double untrained = summary("untrained_acceptance_length");
  std::cout << "[ drafting ] acceptance length " << trained << " against " << untrained
            << " untrained; teacher-forced " << summary("acceptance_length_teacher_forced")
            << ", loss " << summary("initial_loss") << " -> " << summary("final_loss") << std::endl;
  EXPECT_LT(untrained, 1.1);
  EXPECT_GT(trained, 1.5) << launcher_->stderr_text();
  const nlohmann::json doc = nlohmann::json::parse(crash::read_file(summary_path()));
  const double low = doc.at("acceptance_length_interval")[0],
               high = doc.at("acceptance_length_interval")[1];
  EXPECT_LE(low, trained);
  EXPECT_GE(high, trained);
  EXPECT_GT(low, untrained + 0.5) << "the drafter is not told apart from an untrained one";
  EXPECT_EQ(doc.at("eval_prompts"), 63);
  EXPECT_NE(crash::read_file(summary_path()).find("\"matches_greedy\": true"), std::string::npos)
      << crash::read_file(summary_path());
  const std::string config = crash::read_file(run_dir() + "/export/config.json");
  EXPECT_NE(config.find("DFlashDraftModel"), std::string::npos) << config;
  EXPECT_TRUE(fs::exists(run_dir() + "/export/model.safetensors"));
  // What hsring eval measures of the folder is what the run reported.
  const crash::CommandResult eval = crash::run_command(
      {hsring(), "eval", "--drafter", run_dir() + "/export", "--json", dir_.file("eval.json")},
      Millis(300000));
  EXPECT_EQ(eval.exit_code, 0) << eval.out << eval.err;
  const std::optional<double> tau =
      crash::json_number(crash::read_file(dir_.file("eval.json")), "acceptance_length");
  ASSERT_TRUE(tau.has_value()) << crash::read_file(dir_.file("eval.json"));
  // The summary writes 6 significant digits; another drafter would differ far more.
  EXPECT_NEAR(*tau, trained, 5e-6 * trained)
      << "eval measured another drafter than the run reported";
  expect_cleaned_up();
}

// --deterministic: the same flags and seeds train the same drafter, bit for bit, though
// three targets race to publish and two drafters average their gradients. Without it the
// drafters take whichever READY slot they draw, in an order set by the targets' timing.
TEST_F(TrainingRunTest, DeterministicRunsTrainTheSameDrafterBitForBit) {
  // The built-in data named by its folder, as the user's own --data. --no-eval: the runs end
  // at their exports, which are compared here, not decoded (the default job's test decodes
  // one; decoding each run's 7 held-out documents took this test from 5 s to 20 s in release
  // on a loaded 2-core machine, and longer under ASan).
  const crash::CommandResult data = crash::run_command({hsring(), "data", "builtin"});
  ASSERT_EQ(data.exit_code, 0) << data.err;
  const std::string data_dir = data.out.substr(0, data.out.find_last_not_of("\n") + 1);
  std::vector<std::string> outputs;
  for (const char* name : {"first", "second"}) {
    const std::string ring = crash::unique_ring_name(), dir = dir_.file(name);
    const crash::CommandResult run = crash::run_command({hsring(),
                                                         "run",
                                                         "--ring",
                                                         ring,
                                                         "--run-dir",
                                                         dir,
                                                         "--model",
                                                         "builtin",
                                                         "--data",
                                                         data_dir,
                                                         "--deterministic",
                                                         "--batches",
                                                         "16",
                                                         "--targets",
                                                         "cpu:3",
                                                         "--drafters",
                                                         "cpu:2",
                                                         "--slots",
                                                         "6",
                                                         "--summary-json",
                                                         dir_.file(std::string(name) + ".json"),
                                                         "--quiet",
                                                         "--no-eval"},
                                                        kTrainingLimit);
    Ring::remove(ring);
    ASSERT_EQ(run.exit_code, 0) << run.err;
    EXPECT_EQ(crash::json_number(crash::read_file(dir_.file(std::string(name) + ".json")), "steps"),
              8.0);
    // The last checkpoint: fp32 parameters and AdamW moments (the export is bf16).
    const std::vector<std::string> saved = checkpoints_in(dir + "/checkpoints");
    ASSERT_FALSE(saved.empty()) << run.err;
    EXPECT_NE(saved.back().find("step-000000008"), std::string::npos) << saved.back();
    outputs.push_back(crash::read_file(saved.back()));
    ASSERT_FALSE(outputs.back().empty());
  }
  EXPECT_TRUE(outputs[0] == outputs[1]) << "two deterministic runs trained different drafters";
  EXPECT_EQ(crash::read_file(dir_.file("first/export/model.safetensors")),
            crash::read_file(dir_.file("second/export/model.safetensors")));
  // Without batches to end it, a deterministic run is refused: a time limit ends it at a
  // point its timing chooses.
  const crash::CommandResult timed = crash::run_command(
      {hsring(), "run", "--ring", crash::unique_ring_name(), "--run-dir", dir_.file("timed"),
       "--model", "builtin", "--deterministic", "--seconds", "5"});
  EXPECT_EQ(timed.exit_code, 2);
  EXPECT_NE(timed.err.find("--deterministic needs --batches"), std::string::npos) << timed.err;
}

TEST_F(TrainingRunTest, LossFallsAndTheDrafterIsExported) {
  std::vector<std::string> flags = training_flags("120");
  flags.push_back("--keep-ring");
  start_run(flags, /*default_shape=*/true);
  ASSERT_EQ(wait_launcher(kTrainingLimit), 0) << launcher_->stderr_text();
  expect_data_intact();
  EXPECT_EQ(summary("batches_consumed"), 120);
  EXPECT_EQ(summary("steps"), 120);
  const double initial = summary("initial_loss"), final_loss = summary("final_loss");
  std::cout << "[ training ] loss " << initial << " -> " << final_loss << ", agreement "
            << summary("agreement") << std::endl;
  // From ln(256) = 5.5 for a uniform guess: a clear fall, not noise.
  EXPECT_GT(initial, 4.0);
  EXPECT_LT(final_loss, 0.5 * initial);
  EXPECT_GT(summary("agreement"), 0.3);
  EXPECT_TRUE(fs::exists(run_dir() + "/drafter.safetensors"));
  ASSERT_FALSE(checkpoints_in(checkpoints()).empty());
  EXPECT_NE(checkpoints_in(checkpoints()).back().find("step-000000120"), std::string::npos);
  // The kept ring still tells an operator how training went.
  const crash::CommandResult text =
      crash::run_command({hsring(), "status", "--ring", ring_, "--interval", "0"});
  EXPECT_NE(text.out.find("training: step 120, loss "), std::string::npos) << text.out << text.err;
  EXPECT_NE(text.out.find("last checkpoint at step 120"), std::string::npos) << text.out;
  const crash::CommandResult json =
      crash::run_command({hsring(), "status", "--ring", ring_, "--json", "--interval", "0"});
  EXPECT_NE(json.out.find("\"training\": {\"steps\": 120, \"loss\": "), std::string::npos)
      << json.out;
  EXPECT_NE(json.out.find("\"content\": \"model\""), std::string::npos) << json.out;
  const crash::CommandResult prometheus =
      crash::run_command({hsring(), "status", "--ring", ring_, "--prometheus"});
  EXPECT_NE(prometheus.out.find("hsring_training_steps_total{ring=\"" + ring_ + "\"} 120"),
            std::string::npos)
      << prometheus.out;
  EXPECT_NE(prometheus.out.find("hsring_training_loss{"), std::string::npos) << prometheus.out;
  EXPECT_EQ(crash::run_command({hsring(), "ring", "remove", ring_}).exit_code, 0);
  expect_cleaned_up();
}

TEST_F(TrainingRunTest, KilledDrafterResumesFromItsCheckpoint) {
  std::vector<std::string> flags = training_flags("160");
  flags.insert(flags.end(), {"--checkpoint-every", "10"});
  start_run(flags, /*default_shape=*/true);
  // Kill once a checkpoint exists and the drafter has gone past it.
  ASSERT_TRUE(wait_for_consumed(25, Millis(300000))) << launcher_->stderr_text();
  ASSERT_FALSE(checkpoints_in(checkpoints()).empty()) << launcher_->stderr_text();
  std::optional<WorkerProcess> drafter = wait_for_worker("drafter", 0);
  ASSERT_TRUE(drafter);
  ASSERT_TRUE(kill_and_await_restart(*drafter)) << "the drafter was not restarted";
  ASSERT_EQ(wait_launcher(kTrainingLimit), 0) << launcher_->stderr_text();
  const std::string log = launcher_->stderr_text();
  std::smatch resumed;
  ASSERT_TRUE(std::regex_search(log, resumed, std::regex("resumed from \\S+ at step (\\d+)")))
      << log;
  const uint64_t resume_step = std::stoull(resumed[1]);
  EXPECT_GE(resume_step, 10u);
  EXPECT_EQ(resume_step % 10, 0u);
  expect_data_intact();
  EXPECT_EQ(summary("restarts_drafter"), 1);
  // Steps between the checkpoint and the kill were done again: fewer steps than batches,
  // by less than one checkpoint interval plus what was in flight.
  const double steps = summary("steps");
  EXPECT_LT(steps, 160);
  EXPECT_GT(steps, 160 - 10 - 8);
  EXPECT_LT(summary("final_loss"), 0.5 * summary("initial_loss"));
  // The curves' resume rule: the restarted drafter dropped the steps its predecessor took
  // past the checkpoint and took them again; each step is recorded once, in order.
  EXPECT_EQ(curve_steps(run_dir()), one_to(uint64_t(steps))) << log;
}

// Two CPU drafters train one model, averaging gradients: a step takes two batches.
TEST_F(TrainingRunTest, TwoCpuDraftersTrainOneModel) {
  std::vector<std::string> flags = training_flags("120");
  flags.insert(flags.end(), {"--drafters", "cpu:2"});
  start_run(flags, /*default_shape=*/true);
  ASSERT_EQ(wait_launcher(kTrainingLimit), 0) << launcher_->stderr_text();
  expect_data_intact();
  EXPECT_EQ(summary("batches_consumed"), 120);
  const double steps = summary("steps");
  EXPECT_LE(steps, 60);
  EXPECT_GE(steps, 58);  // the last batches may not pair up before the drain
  const double initial = summary("initial_loss"), final_loss = summary("final_loss");
  std::cout << "[ training ] 2 drafters: " << steps << " steps, loss " << initial << " -> "
            << final_loss << std::endl;
  EXPECT_GT(initial, 4.0);
  EXPECT_LT(final_loss, 0.6 * initial);
  const std::string log = launcher_->stderr_text();
  EXPECT_NE(log.find("of a group of 2"), std::string::npos) << log;
  EXPECT_EQ(log.find("left its drafter group"), std::string::npos) << log;
  EXPECT_TRUE(fs::exists(run_dir() + "/drafter.safetensors"));
  EXPECT_FALSE(fs::exists("/dev/shm/" + ring_ + "-grads")) << "the exchange was left behind";
  expect_cleaned_up();
}

// SIGKILL of one member: the other leaves the group, both reload the newest checkpoint
// (written by drafter 0 only) and the run finishes with a falling loss.
TEST_F(TrainingRunTest, KilledGroupMemberRestartsTheGroupFromACheckpoint) {
  std::vector<std::string> flags = training_flags("160");
  flags.insert(flags.end(), {"--drafters", "cpu:2", "--checkpoint-every", "5"});
  start_run(flags, /*default_shape=*/true);
  ASSERT_TRUE(wait_for_consumed(40, Millis(300000))) << launcher_->stderr_text();
  ASSERT_FALSE(checkpoints_in(checkpoints()).empty()) << launcher_->stderr_text();
  std::optional<WorkerProcess> drafter = wait_for_worker("drafter", 1);
  ASSERT_TRUE(drafter);
  ASSERT_TRUE(kill_and_await_restart(*drafter)) << "drafter 1 was not restarted";
  ASSERT_EQ(wait_launcher(kTrainingLimit), 0) << launcher_->stderr_text();
  const std::string log = launcher_->stderr_text();
  EXPECT_NE(log.find("drafter 0 left its drafter group"), std::string::npos) << log;
  // Both members resumed from a checkpoint after the kill.
  const Resumes resumes = resumes_in(log);
  EXPECT_EQ(resumes.drafters, (std::set<uint32_t>{0, 1})) << log;
  for (uint64_t step : resumes.steps) EXPECT_EQ(step % 5, 0u);
  expect_data_intact();
  EXPECT_EQ(summary("restarts_drafter"), 1);  // the kill; leaving the group is no crash
  const double steps = summary("steps");
  EXPECT_LT(steps, 80);
  EXPECT_GT(steps, 80 - 5 - 8);
  EXPECT_LT(summary("final_loss"), 0.6 * summary("initial_loss"));
  EXPECT_FALSE(fs::exists("/dev/shm/" + ring_ + "-grads"));
}

TEST_F(TrainingRunTest, CheckpointDirFlagPutsTheCheckpointsThere) {
  const std::string elsewhere = dir_.file("elsewhere");
  std::vector<std::string> flags = training_flags("20");
  flags.insert(flags.end(), {"--checkpoint-dir", elsewhere, "--checkpoint-every", "5"});
  start_run(flags, /*default_shape=*/true);
  ASSERT_EQ(wait_launcher(kTrainingLimit), 0) << launcher_->stderr_text();
  const std::vector<std::string> written = checkpoints_in(elsewhere);
  ASSERT_FALSE(written.empty()) << launcher_->stderr_text();
  EXPECT_NE(written.back().find("step-000000020"), std::string::npos);
  EXPECT_FALSE(fs::exists(checkpoints())) << "nothing in the run folder's default place";
  EXPECT_TRUE(fs::exists(run_dir() + "/drafter.safetensors"));
  // A second fresh run into the same folder would resume by surprise: refused.
  start_run(flags, /*default_shape=*/true);
  EXPECT_NE(wait_launcher(kTrainingLimit), 0);
  EXPECT_NE(launcher_->stderr_text().find("already holds checkpoints of an earlier run"),
            std::string::npos)
      << launcher_->stderr_text();
}

TEST_F(TrainingRunTest, ResumeContinuesAFinishedRun) {
  start_run(training_flags("40"), /*default_shape=*/true);
  ASSERT_EQ(wait_launcher(kTrainingLimit), 0) << launcher_->stderr_text();
  const double first_initial = summary("initial_loss");
  const double first_final = summary("final_loss");

  // A fresh run may not reuse that folder: it would resume by surprise.
  const crash::CommandResult refused = crash::run_command(
      {hsring(), "run", "--ring", ring_, "--model", "tiny", "--run-dir", run_dir()});
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_NE(refused.err.find("--resume " + checkpoints()), std::string::npos) << refused.err;

  std::vector<std::string> flags = training_flags("40");
  flags.insert(flags.end(), {"--resume", checkpoints()});
  start_run(flags, /*default_shape=*/true);
  ASSERT_EQ(wait_launcher(kTrainingLimit), 0) << launcher_->stderr_text();
  EXPECT_NE(launcher_->stderr_text().find("resuming from step 40"), std::string::npos)
      << launcher_->stderr_text();
  EXPECT_EQ(summary("steps"), 80);
  // The curve continues: the resumed run starts near where the first one ended.
  EXPECT_LT(summary("initial_loss"), 0.5 * first_initial);
  EXPECT_LT(summary("initial_loss"), first_final * 3 + 0.5);
  EXPECT_TRUE(fs::exists(run_dir() + "/drafter.safetensors"));
}

TEST_F(TrainingRunTest, DamagedCheckpointsAreSkippedOrStopTheRun) {
  std::vector<std::string> flags = training_flags("30");
  flags.insert(flags.end(), {"--checkpoint-every", "10"});
  start_run(flags, /*default_shape=*/true);
  ASSERT_EQ(wait_launcher(kTrainingLimit), 0) << launcher_->stderr_text();
  std::vector<std::string> files = checkpoints_in(checkpoints());
  ASSERT_GE(files.size(), 2u);
  // Truncate the newest: resuming falls back to the one before, and says so.
  fs::resize_file(files.back(), fs::file_size(files.back()) / 2);
  std::vector<std::string> resume = training_flags("10");
  resume.insert(resume.end(), {"--resume", checkpoints()});
  start_run(resume, /*default_shape=*/true);
  ASSERT_EQ(wait_launcher(kTrainingLimit), 0) << launcher_->stderr_text();
  const std::string log = launcher_->stderr_text();
  EXPECT_NE(log.find("resuming from step 20"), std::string::npos) << log;
  EXPECT_NE(log.find("skipped damaged checkpoint"), std::string::npos) << log;

  // Every checkpoint damaged: a clear error, never a silent restart from zero.
  for (const std::string& file : checkpoints_in(checkpoints())) {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x5a');
  }
  const crash::CommandResult r = crash::run_command(
      {hsring(), "run", "--ring", ring_, "--model", "tiny", "--resume", checkpoints()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(checkpoints()), std::string::npos) << r.err;
  EXPECT_FALSE(crash::segment_exists(ring_));
}

}  // namespace
}  // namespace hsring
