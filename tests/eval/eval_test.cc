#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "checkpoint/dflash_export.h"
#include "common/error.h"
#include "data/batch_index.h"
#include "data/corpus.h"
#include "data/default_corpus.h"
#include "data/shard_writer.h"
#include "data/token_batch.h"
#include "eval/cpu_evaluate.h"
#include "eval/eval_command.h"
#include "eval/speculative_decode.h"
#include "model/cpu_target_model.h"
#include "train/dflash_blocks.h"
#include "train/optimizer.h"

namespace hsring::eval {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kBlock = 4;
constexpr uint32_t kCaptured = 2;

struct Fixture {
  std::unique_ptr<CpuTargetModel> target = open_cpu_model("tiny", 0, {2});
  std::vector<int32_t> layers = default_capture_layers(target->config().num_layers, kCaptured);
  train::DflashConfig config = [this] {
    train::DflashConfig c = train::default_dflash_config(target->config(), kCaptured, 1);
    c.block_size = kBlock;
    return c;
  }();
  const ModelWeights& w = target->weights();
  train::DflashTargetWeights target_weights() const {
    return {w.embed_tokens, w.lm_head_or_embeddings()};
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("hsring-eval-test-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(dir);
  return dir;
}

checkpoint::DflashExport export_and_read(const train::DflashModel& model, const fs::path& dir) {
  Fixture& f = fixture();
  checkpoint::write_dflash_export(dir.string(), model.config(), f.layers, model.layout(),
                                  model.params(),
                                  {.num_target_layers = f.target->config().num_layers});
  return checkpoint::read_dflash_export(dir.string());
}

// The first tokens of the last documents of the built-in corpus's held-out part.
std::vector<EvalPrompt> prompts(uint32_t count, uint32_t tokens) {
  return held_out_prompts(data::Corpus::open(data::default_heldout_dir()), count, tokens);
}

TEST(SpeculativeDecodeTest, OutputIsPlainGreedyDecodingTokenForToken) {
  Fixture& f = fixture();
  train::DflashModel drafter(f.config, f.target_weights(), 7, 2);
  for (const EvalPrompt& p : prompts(2, 24)) {
    const std::vector<int32_t>& prompt = p.tokens;
    const SpeculativeResult r = speculative_decode(*f.target, drafter, f.layers, prompt, 20);
    EXPECT_EQ(drafter.config().block_size, kBlock);  // the last blocks' cut is undone
    EXPECT_EQ(r.tokens, greedy_decode(*f.target, prompt, 20));
    ASSERT_EQ(r.tokens.size(), 20u);
    uint32_t produced = 1;  // the prefill's token
    for (const uint32_t n : r.produced) {
      EXPECT_GE(n, 1u);
      EXPECT_LE(n, kBlock);
      produced += n;
    }
    EXPECT_EQ(produced, 20u);
  }
}

TEST(SpeculativeDecodeTest, OneForwardTellsAGreedyContinuationFromAnother) {
  Fixture& f = fixture();
  for (const EvalPrompt& p : prompts(2, 24)) {
    std::vector<int32_t> greedy = greedy_decode(*f.target, p.tokens, 12);
    EXPECT_TRUE(is_greedy_continuation(*f.target, p.tokens, greedy));
    EXPECT_TRUE(is_greedy_continuation(*f.target, p.tokens, std::span(greedy).first(5)));
    for (const size_t at : {size_t(0), size_t(7), greedy.size() - 1}) {
      std::vector<int32_t> other = greedy;
      other[at] = (other[at] + 1) % int32_t(f.target->config().vocab_size);
      EXPECT_FALSE(is_greedy_continuation(*f.target, p.tokens, other)) << at;
    }
  }
}

TEST(SpeculativeDecodeTest, ADrafterThatDoesNotFitTheTargetIsRefused) {
  Fixture& f = fixture();
  train::DflashConfig c = f.config;
  c.target_hidden = 64;
  std::vector<float> embed(size_t(c.vocab_size) * 64, 0.0f);
  train::DflashModel narrow(c, {embed, embed});
  const std::vector<int32_t> prompt = {1, 2, 3};
  EXPECT_THROW(speculative_decode(*f.target, narrow, f.layers, prompt, 4), Error);

  train::DflashModel drafter(f.config, f.target_weights());
  checkpoint::DflashExport e = export_and_read(drafter, fresh_dir("fit"));
  e.num_target_layers = 5;
  try {
    evaluate(*f.target, e, prompts(1, 16), 4);
    FAIL() << "a drafter for a 5-layer target was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("num_target_layers"), std::string::npos)
        << error.what();
  }
}

// The tiny target's captured layers and greedy tokens over built-in corpus batches: what the
// ring would carry (labels: the target's greedy next token, self-distillation).
struct TrainingBatch {
  std::vector<float> features;
  std::vector<int32_t> tokens, positions, doc_offsets, labels;
};

std::vector<TrainingBatch> target_batches(size_t count, uint32_t tokens) {
  Fixture& f = fixture();
  const data::Corpus corpus = data::open_token_data("");
  const data::BatchIndex index(corpus, {.max_tokens = tokens, .seed = 1});
  std::vector<TrainingBatch> out;
  ForwardRequest request;
  request.capture_layers = f.layers;
  ForwardOutput o;
  const size_t h = f.target->config().hidden_size;
  for (uint64_t id = 0; id < count; ++id) {
    const data::TokenBatch b = data::read_batch(corpus, index, id);
    f.target->forward({b.tokens, b.positions, b.doc_offsets}, request, o);
    TrainingBatch t{{}, b.tokens, b.positions, b.doc_offsets, o.greedy};
    t.features.resize(b.tokens.size() * kCaptured * h);
    for (size_t r = 0; r < b.tokens.size(); ++r)
      for (size_t l = 0; l < kCaptured; ++l)
        std::copy_n(o.captured[l].data() + r * h, h, t.features.data() + (r * kCaptured + l) * h);
    // The last row of each document has no next token in the data.
    for (size_t d = 1; d < b.doc_offsets.size(); ++d) t.labels[b.doc_offsets[d] - 1] = kIgnoreLabel;
    out.push_back(std::move(t));
  }
  return out;
}

TEST(EvalTest, TrainedDrafterDraftsClearlyBetterThanAnUntrainedOne) {
  Fixture& f = fixture();
  const auto start = std::chrono::steady_clock::now();
  const auto eval_prompts = prompts(3, 32);
  constexpr uint32_t kNew = 32;

  train::DflashModel untrained(f.config, f.target_weights(), 11, 2);
  const EvalReport before = evaluate(*f.target, export_and_read(untrained, fresh_dir("untrained")),
                                     eval_prompts, kNew, 2);

  const std::vector<TrainingBatch> batches = target_batches(6, 256);
  train::DflashModel model(f.config, f.target_weights(), 11, 2);
  constexpr uint64_t kSteps = 100;
  train::AdamWOptions options;
  options.schedule = {.peak_lr = 5e-3, .min_lr = 5e-4, .warmup_steps = 10, .total_steps = kSteps};
  train::AdamW adamw(options, model.layout());
  double first_tau = 0, last_tau = 0;
  for (uint64_t step = 0; step < kSteps; ++step) {
    const TrainingBatch& b = batches[step % batches.size()];
    const std::vector<int32_t> anchors =
        train::sample_anchors(b.doc_offsets, b.labels, kBlock, 48, 100 + step);
    model.zero_grads();
    const train::DflashStats s = model.forward_backward(
        {b.features, b.tokens, b.positions, b.doc_offsets, b.labels, anchors});
    adamw.update(model.params(), model.grads());
    if (step < 8) first_tau += s.acceptance_length / 8;
    if (step >= kSteps - 8) last_tau += s.acceptance_length / 8;
  }
  const fs::path dir = fresh_dir("trained");
  const EvalReport after = evaluate(*f.target, export_and_read(model, dir), eval_prompts, kNew, 2);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "teacher-forced tau %.3f -> %.3f; hsring eval tau untrained %.3f, trained %.3f "
      "(B %u, %.1f s)\n",
      first_tau, last_tau, before.acceptance_length, after.acceptance_length, kBlock, seconds);

  EXPECT_TRUE(before.matches_greedy);
  EXPECT_TRUE(after.matches_greedy);
  EXPECT_LE(after.acceptance_length_interval.low, after.acceptance_length);
  EXPECT_GE(after.acceptance_length_interval.high, after.acceptance_length);
  for (const PromptResult& p : after.prompts) EXPECT_EQ(p.output, p.greedy);
  EXPECT_LT(before.acceptance_length, 1.4);
  // A random target on held-out prompts: the margin is smaller than the built-in trained
  // target's (TrainingRunTest.TheDefaultJobTrainsADrafterThatDrafts), but clear.
  EXPECT_GT(after.acceptance_length, before.acceptance_length + 0.2);
  ASSERT_EQ(after.position_acceptance.size(), kBlock - 1);
  // Rates over the steps that verified each position (the last block of a prompt may be
  // cut short, so the denominators differ and the rates need not fall monotonically).
  for (const double rate : after.position_acceptance) {
    EXPECT_GE(rate, 0.0);
    EXPECT_LE(rate, 1.0);
  }

  // The same export through the command's own path, with its JSON report: the default
  // windows, the first of each held-out document (the last ones above among them).
  EvalOptions o;
  o.model = "tiny";  // the random preset the fixture uses
  o.drafter = dir.string();
  o.prompts.max_prompts = 7;
  o.prompts.prompt_tokens = 32;
  o.max_new_tokens = 16;
  o.threads = 2;
  o.json_path = (dir / "report.json").string();
  EXPECT_EQ(run_eval(o), 0);
  std::ifstream in(o.json_path);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_TRUE(j.at("acceptance_length").is_number());
  EXPECT_GT(j.at("acceptance_length").get<double>(), 1.0);
  EXPECT_EQ(j.at("position_acceptance").size(), kBlock - 1);
  EXPECT_EQ(j.at("matches_greedy"), true);
  ASSERT_EQ(j.at("prompts").size(), 7u);
  EXPECT_EQ(j.at("prompts")[0].at("output").size(), 16u);
  EXPECT_EQ(j.at("prompts")[0].at("output"), j.at("prompts")[0].at("greedy"));
  fs::remove_all(dir);
}

// --prompts names a token-shard folder; the JSON keeps each prompt's place and source.
TEST(EvalTest, PromptFolderDocumentsAreThePrompts) {
  Fixture& f = fixture();
  train::DflashModel drafter(f.config, f.target_weights(), 5, 2);
  const fs::path dir = fresh_dir("prompt-folder");
  export_and_read(drafter, dir / "export");
  const std::vector<EvalPrompt> texts = prompts(3, 20);
  fs::create_directories(dir / "prompts");
  {
    data::ShardWriter writer((dir / "prompts" / "p.hstok").string(), 2, 256);
    for (size_t i = 0; i < texts.size(); ++i) {
      std::vector<uint32_t> doc(texts[i].tokens.begin(), texts[i].tokens.end() - int(i));
      writer.add_document(doc);
    }
    writer.finish();
  }
  EvalOptions o;
  o.model = "tiny";
  o.drafter = (dir / "export").string();
  o.prompts.prompts = (dir / "prompts").string();
  o.max_new_tokens = 8;
  o.threads = 2;
  o.json_path = (dir / "report.json").string();
  EXPECT_EQ(run_eval(o), 0);
  std::ifstream in(o.json_path);
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j.at("prompts").size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const nlohmann::json& p = j.at("prompts")[i];
    EXPECT_EQ(p.at("index"), i);
    EXPECT_EQ(p.at("source"), "p.hstok#" + std::to_string(i));
    EXPECT_EQ(p.at("prompt").size(), 20 - i);
    EXPECT_EQ(p.at("output"), p.at("greedy"));
  }
  const double tau = j.at("acceptance_length");
  EXPECT_LE(j.at("acceptance_length_interval")[0].get<double>(), tau);
  EXPECT_GE(j.at("acceptance_length_interval")[1].get<double>(), tau);
  o.prompts.max_prompts = 2;
  EXPECT_EQ(run_eval(o), 0);
  std::ifstream again(o.json_path);
  EXPECT_EQ(nlohmann::json::parse(again).at("prompts").size(), 2u);
  fs::remove_all(dir);
}

TEST(EvalTest, ClearErrors) {
  EvalOptions o;
  o.model = "tiny";  // the random preset the fixture uses
  o.drafter = fresh_dir("missing").string();
  EXPECT_THROW(run_eval(o), std::exception);
  Fixture& f = fixture();
  train::DflashModel drafter(f.config, f.target_weights());
  const fs::path dir = fresh_dir("errors");
  export_and_read(drafter, dir);
  o.drafter = dir.string();
  o.prompts.data = dir.string();  // a folder, but not a corpus
  try {
    run_eval(o);
    FAIL() << "a folder without shards was taken for a corpus";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(dir.string()), std::string::npos) << e.what();
  }
  // --gpu naming a GPU no machine here has: refused by name, before any weight is loaded.
  o.prompts.data.clear();
  o.gpu = 99;
  try {
    run_eval(o);
    FAIL() << "--gpu 99 was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GPU 99"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hsring::eval
