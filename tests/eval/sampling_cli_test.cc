// `hsring eval --temperature` and `hsring data generate --temperature` as a user runs them,
// on the built-in trained target on the CPU: the same seed gives the same tokens whatever
// the thread count, another seed others; the JSON report and the run record say how the
// tokens were chosen; a temperature near 0 gives greedy decoding's tokens; bad sampling
// flags are refused with the usage exit code (2) and a message naming the flag.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../crash/process_util.h"
#include "../data/test_corpus.h"
#include "builtin/pretrain.h"
#include "checkpoint/dflash_export.h"
#include "common/random.h"
#include "data/shard_writer.h"
#include "model/target_model.h"
#include "train/dflash_config.h"
#include "train/dflash_params.h"

namespace hsring::eval {
namespace {

namespace fs = std::filesystem;
using data::testing::TempDir;

constexpr int kUsageExit = 2;  // docs/operations.md, "Error classes and exit codes"

crash::CommandResult hsring(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {crash::bin_dir() + "/hsring"};
  argv.insert(argv.end(), args.begin(), args.end());
  return crash::run_command(argv, crash::Millis(120000));
}

// A DFlash export for the built-in target: init's weights plus noise, so its drafts vary.
std::string write_drafter(const std::string& dir) {
  const ModelConfig target = model_config_of(builtin::resolve_model_spec(builtin::kBuiltinModel));
  train::DflashConfig config = train::default_dflash_config(target, 2, 1);
  config.block_size = 4;
  const train::ParamLayout layout = train::dflash_param_layout(config);
  std::vector<float> params(layout.total, 0.0f);
  train::init_dflash_params<float>(layout, 5, params);
  uint64_t state = 17;
  for (float& p : params) p += 0.2f * (float(double(splitmix64(state) >> 11) * 0x1.0p-53) - 0.5f);
  const std::string out = dir + "/drafter";
  checkpoint::write_dflash_export(out, config, default_capture_layers(target.num_layers, 2), layout,
                                  params, {.num_target_layers = target.num_layers});
  return out;
}

nlohmann::json eval_json(const std::string& drafter, const std::string& json,
                         const std::vector<std::string>& more) {
  std::vector<std::string> args = {"eval",  "--model",       "builtin", "--drafter",
                                   drafter, "--max-prompts", "3",       "--max-new-tokens",
                                   "12",    "--json",        json};
  args.insert(args.end(), more.begin(), more.end());
  const auto r = hsring(args);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const bool sampled = std::find(more.begin(), more.end(), "--temperature") != more.end();
  EXPECT_NE(r.out.find(sampled ? "sampled: temperature" : "matches greedy: yes"), std::string::npos)
      << r.out;
  std::ifstream in(json);
  return nlohmann::json::parse(in);
}

std::vector<nlohmann::json> outputs_of(const nlohmann::json& report) {
  std::vector<nlohmann::json> out;
  for (const nlohmann::json& p : report.at("prompts")) out.push_back(p.at("output"));
  return out;
}

TEST(SamplingCliTest, EvalSamplesReproduciblyAndSaysHow) {
  TempDir dir;
  const std::string drafter = write_drafter(dir.path());
  const std::vector<std::string> sampled = {"--temperature", "0.8",    "--top-p",
                                            "0.95",          "--seed", "7"};
  std::vector<std::string> one_thread = sampled, two_threads = sampled, other_seed = sampled;
  one_thread.insert(one_thread.end(), {"--threads", "1"});
  two_threads.insert(two_threads.end(), {"--threads", "2"});
  other_seed.back() = "8";
  const nlohmann::json a = eval_json(drafter, dir.path() + "/a.json", one_thread);
  const nlohmann::json b = eval_json(drafter, dir.path() + "/b.json", two_threads);
  const nlohmann::json c = eval_json(drafter, dir.path() + "/c.json", other_seed);
  EXPECT_EQ(a.at("decoding"), "sampling");
  EXPECT_EQ(a.at("temperature"), 0.8);
  EXPECT_EQ(a.at("top_p"), 0.95);
  EXPECT_EQ(a.at("seed"), 7);
  EXPECT_FALSE(a.contains("matches_greedy")) << "a sampled run has no greedy output to match";
  ASSERT_EQ(a.at("prompts").size(), 3u);
  EXPECT_FALSE(a.at("prompts")[0].contains("greedy"));
  EXPECT_EQ(a.at("prompts")[0].at("output").size(), 12u);
  EXPECT_EQ(outputs_of(a), outputs_of(b)) << "the thread count changed the sampled tokens";
  EXPECT_EQ(a.at("acceptance_length"), b.at("acceptance_length"));
  EXPECT_NE(outputs_of(a), outputs_of(c)) << "another seed gave the same tokens";

  // Temperature -> 0: greedy decoding's tokens, which the greedy run checks and reports.
  const nlohmann::json greedy = eval_json(drafter, dir.path() + "/g.json", {});
  EXPECT_EQ(greedy.at("decoding"), "greedy");
  EXPECT_EQ(greedy.at("matches_greedy"), true);
  EXPECT_FALSE(greedy.contains("temperature"));
  const nlohmann::json cold =
      eval_json(drafter, dir.path() + "/cold.json", {"--temperature", "0.0001", "--seed", "3"});
  EXPECT_EQ(outputs_of(cold), outputs_of(greedy));
  EXPECT_NE(outputs_of(a), outputs_of(greedy));
}

// Byte-level prompts for the built-in target (its vocabulary of 257 holds 256).
std::string write_prompts(const std::string& dir) {
  const std::string prompts = dir + "/prompts";
  fs::create_directories(prompts);
  data::ShardWriter writer(prompts + "/p.hstok", 1, 256);
  for (const char* text : {"The ring of slots ", "", "Drafters train on", "Q: why?\nA: "})
    writer.add_text_document(text);
  writer.finish();
  return prompts;
}

std::vector<char> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

// The shard a `data generate` run writes, after the flags `more`.
std::vector<char> generated(const std::string& prompts, const std::string& out,
                            const std::vector<std::string>& more) {
  std::vector<std::string> args = {"data",  "generate", "--model", "builtin",          "--data",
                                   prompts, "-o",       out,       "--max-new-tokens", "10"};
  args.insert(args.end(), more.begin(), more.end());
  const auto r = hsring(args);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  return slurp(out + "/shard-00000.hstok");
}

TEST(SamplingCliTest, DataGenerateSamplesReproduciblyAndRecordsIt) {
  TempDir dir;
  const std::string prompts = write_prompts(dir.path());
  const std::string d = dir.path();
  const auto a =
      generated(prompts, d + "/a", {"--temperature", "0.9", "--seed", "3", "--threads", "1"});
  const auto b =
      generated(prompts, d + "/b", {"--temperature", "0.9", "--seed", "3", "--threads", "2"});
  const auto c = generated(prompts, d + "/c", {"--temperature", "0.9", "--seed", "4"});
  const auto greedy = generated(prompts, d + "/g", {});
  const auto cold = generated(prompts, d + "/cold", {"--temperature", "0.0001", "--seed", "4"});
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, b) << "the thread count changed the sampled shard";
  EXPECT_NE(a, c) << "another seed wrote the same shard";
  EXPECT_NE(a, greedy);
  EXPECT_EQ(cold, greedy) << "temperature 1e-4 is not greedy decoding";
  std::ifstream record(d + "/a/generate.json");
  const nlohmann::json j = nlohmann::json::parse(record);
  EXPECT_EQ(j.at("temperature"), 0.9);
  EXPECT_EQ(j.at("top_p"), 1.0);
  EXPECT_EQ(j.at("seed"), 3);
  std::ifstream greedy_record(d + "/g/generate.json");
  EXPECT_FALSE(nlohmann::json::parse(greedy_record).contains("temperature"));
}

TEST(SamplingCliTest, BadSamplingFlagsAreUsageErrorsNamingTheFlag) {
  TempDir dir;
  const std::string prompts = write_prompts(dir.path());
  const std::string out = dir.path() + "/out";
  const struct {
    std::vector<std::string> flags;
    const char* says;
  } cases[] = {
      {{"--temperature=-1"}, "--temperature must be a finite number >= 0"},
      {{"--temperature", "-0.5"}, "--temperature must be a finite number >= 0"},
      {{"--temperature", "0.7", "--top-p", "0"}, "--top-p must be in (0, 1]"},
      {{"--temperature", "0.7", "--top-p", "1.5"}, "--top-p must be in (0, 1]"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> eval = {"eval", "--model", "builtin", "--drafter",
                                     dir.path() + "/none"};
    std::vector<std::string> generate = {
        "data",  "generate", "--model", "builtin",          "--data",
        prompts, "-o",       out,       "--max-new-tokens", "4"};
    for (auto* args : {&eval, &generate}) {
      args->insert(args->end(), c.flags.begin(), c.flags.end());
      const auto r = hsring(*args);
      EXPECT_EQ(r.exit_code, kUsageExit) << (*args)[0] << " " << c.says << ": " << r.out << r.err;
      EXPECT_NE((r.out + r.err).find(c.says), std::string::npos) << r.out << r.err;
    }
    EXPECT_FALSE(fs::exists(out)) << "a refused run wrote its output";
  }
}

}  // namespace
}  // namespace hsring::eval
