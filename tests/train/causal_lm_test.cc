// The pretrain causal LM: its backward against finite differences, its exported folder
// against the target loader's own forward, the corpus batcher, a short pretrain whose loss
// falls, and the refusals of --out.
#include "train/causal_lm.h"
#include "tests/common/thrown_error.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

#include "builtin/pretrain.h"
#include "common/error.h"
#include "grad_check.h"
#include "model/cpu_target_model.h"
#include "tests/common/planted_files.h"
#include "train/optimizer.h"

namespace hsring::train {
namespace {

using hsring::testing::thrown_code;

using namespace hsring::builtin;  // hsring model pretrain, tested beside the causal LM it trains

namespace fs = std::filesystem;

struct OwnedLmBatch {
  std::vector<int32_t> tokens, positions, offsets, labels;
  CausalLmBatch view() const { return {tokens, positions, offsets, labels}; }
};

// Documents of the given lengths with random tokens below `vocab`; labels the next token,
// none on each document's last.
OwnedLmBatch random_lm_batch(const std::vector<int32_t>& lengths, uint32_t vocab, uint64_t seed) {
  OwnedLmBatch b;
  b.offsets.push_back(0);
  const std::vector<double> u = testing::random_values(4096, seed, 0.0, 1.0);
  size_t next = 0;
  for (int32_t len : lengths) {
    const size_t first = b.tokens.size();
    for (int32_t i = 0; i < len; ++i) {
      b.tokens.push_back(int32_t(u[next++ % u.size()] * vocab) % int32_t(vocab));
      b.positions.push_back(i);
    }
    for (int32_t i = 0; i < len; ++i)
      b.labels.push_back(i + 1 < len ? b.tokens[first + size_t(i) + 1] : kIgnoreLabel);
    b.offsets.push_back(int32_t(b.tokens.size()));
  }
  return b;
}

ModelConfig small_lm_config(bool qk_norm, bool tied) {
  ModelConfig c;
  c.name = "small-lm";
  c.model_type = qk_norm ? "qwen3" : "llama";
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.vocab_size = 11;
  c.qk_norm = qk_norm;
  c.tie_embeddings = tied;
  return c;
}

fs::path scratch_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("hsring-causal-lm-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(dir);
  return dir;
}

TEST(CausalLmLayoutTest, HuggingFaceNamesInCheckpointOrder) {
  const ModelConfig c = pretrain_model_config(2);
  const ParamLayout layout = causal_lm_layout(c);
  ModelWeights w;
  std::vector<std::string> expected, got;
  for (const WeightTensor& t : weight_tensors(c, w)) expected.push_back(t.name);
  for (const ParamInfo& t : layout.tensors) got.push_back(t.name);
  EXPECT_EQ(got, expected);
  EXPECT_EQ(layout.at("model.embed_tokens.weight").shape, (std::vector<int64_t>{257, 128}));
  EXPECT_EQ(layout.find("lm_head.weight"), nullptr);  // tied
}

// Every tensor's backward against central differences of the mean loss, in double, with
// jittered weights, two documents, for QK-norm + tied and for neither.
class CausalLmGradientTest : public ::testing::TestWithParam<bool> {};

TEST_P(CausalLmGradientTest, EveryTensor) {
  const bool qwen = GetParam();
  const ModelConfig c = small_lm_config(qwen, qwen);
  BasicCausalLm<double> model(c, 5);
  const std::vector<double> jitter = testing::random_values(model.params().size(), 6, -0.3, 0.3);
  for (const ParamInfo& t : model.layout().tensors)
    for (size_t i = t.offset; i < t.offset + t.size; ++i) model.params()[i] += jitter[i];
  const OwnedLmBatch batch = random_lm_batch({6, 5}, c.vocab_size, 7);
  model.zero_grads();
  const LossStats stats = model.forward_backward(batch.view());
  EXPECT_EQ(stats.counted, 9u);
  const std::vector<double> grads(model.grads().begin(), model.grads().end());
  const auto loss = [&] { return model.forward(batch.view()).loss; };
  for (const ParamInfo& t : model.layout().tensors) {
    std::vector<size_t> indices = testing::sample_indices(t.size, 30, t.offset);
    for (size_t& i : indices) i += t.offset;
    const testing::GradCheck g = testing::check_gradient(model.params(), grads, loss, indices);
    EXPECT_LT(g.max_error, 1e-6) << g.describe(t.name);
  }
}

INSTANTIATE_TEST_SUITE_P(Options, CausalLmGradientTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Qwen3TiedQkNorm" : "LlamaUntied";
                         });

TEST(CausalLmTest, RejectsBadBatches) {
  CausalLm model(small_lm_config(true, true), 1);
  OwnedLmBatch b = random_lm_batch({4}, 11, 2);
  b.tokens[1] = 11;
  EXPECT_EQ(thrown_code([&] { model.forward(b.view()); }), Errc::kModel);
  b = random_lm_batch({4}, 11, 2);
  b.offsets = {0, 2};
  EXPECT_EQ(thrown_code([&] { model.forward(b.view()); }), Errc::kModel);
}

// A few updates, then the folder: open_cpu_model's forward gives the same greedy tokens and
// captured layers as the model's own.
TEST(CausalLmTest, WrittenFolderLoadsAsTheSameTarget) {
  const ModelConfig c = pretrain_model_config(2);
  CausalLm model(c, 3, 2);
  AdamWOptions adam;
  adam.schedule.peak_lr = 3e-3;
  AdamW optimizer(adam, model.layout());
  CorpusBatcher batches(builtin_corpus_documents(), 256, 4);
  for (int step = 0; step < 5; ++step) {
    model.zero_grads();
    model.forward_backward(batches.next());
    optimizer.update(model.params(), model.grads());
  }
  const fs::path dir = scratch_dir("export");
  write_pretrained_folder(dir, c, causal_lm_weights(c, model.layout(), model.params()),
                          "{\"format\": \"hsring-pretrain-v1\"}\n");
  std::unique_ptr<CpuTargetModel> target = open_cpu_model(dir.string(), 0, {2});
  EXPECT_EQ(target->config().vocab_size, 257u);
  EXPECT_TRUE(target->config().qk_norm);
  EXPECT_TRUE(target->config().tie_embeddings);

  const CausalLmBatch batch = batches.next();
  model.forward(batch);
  const PackedBatch packed{batch.tokens, batch.positions, batch.doc_offsets};
  ForwardRequest request;
  request.capture_layers = {0, 1};
  request.greedy = true;
  ForwardOutput out;
  target->forward(packed, request, out);
  EXPECT_EQ(out.greedy, std::vector<int32_t>(model.greedy().begin(), model.greedy().end()));
  for (size_t k = 0; k < 2; ++k) {
    const std::span<const float> own = model.layer_output(k);
    ASSERT_EQ(out.captured[k].size(), own.size());
    double worst = 0, scale = 0;
    for (size_t i = 0; i < own.size(); ++i) {
      worst = std::max(worst, std::fabs(double(out.captured[k][i]) - double(own[i])));
      scale = std::max(scale, std::fabs(double(own[i])));
    }
    EXPECT_LT(worst, 1e-5 * scale) << "layer " << k;
  }
  fs::remove_all(dir);
}

// The staging and set-aside folders beside the output were named by pid, so a co-tenant
// could plant them; they are new folders of random names now, and a symlink planted at
// the old names never receives the model (a race before: removed, then created).
TEST(CausalLmTest, PlantedStagingNamesNeverReceiveTheFolder) {
  const ModelConfig c = pretrain_model_config(1);
  CausalLm model(c, 3, 2);
  const fs::path dir = scratch_dir("planted");
  const fs::path elsewhere = scratch_dir("planted-elsewhere");
  fs::create_directories(elsewhere);
  hsring::testing::make_victim((elsewhere / "victim").string());
  fs::create_directories(dir.parent_path());
  for (const char* kind : {".tmp-", ".old-"})
    hsring::testing::plant_symlink(
        (dir.parent_path() / ("." + dir.filename().string() + kind + std::to_string(::getpid())))
            .string(),
        elsewhere.string());
  for (int i = 0; i < 2; ++i)  // the second replaces the first
    write_pretrained_folder(dir, c, causal_lm_weights(c, model.layout(), model.params()),
                            "{\"format\": \"hsring-pretrain-v1\"}\n");
  EXPECT_EQ(open_cpu_model(dir.string(), 0, {0})->config().num_layers, 1u);
  EXPECT_TRUE(hsring::testing::victim_untouched((elsewhere / "victim").string()));
  EXPECT_EQ(std::distance(fs::directory_iterator(elsewhere), fs::directory_iterator()), 1);
  fs::remove_all(dir);
  fs::remove_all(elsewhere);
}

TEST(CorpusBatcherTest, PacksDocumentsDeterministically) {
  const std::vector<std::vector<int32_t>> docs = builtin_corpus_documents();
  ASSERT_GT(docs.size(), 10u);
  CorpusBatcher a(docs, 512, 9), b(docs, 512, 9), other(docs, 512, 10);
  bool differs = false;
  for (int i = 0; i < 80; ++i) {  // past an epoch (the corpus is ~32k bytes)
    const CausalLmBatch x = a.next(), y = b.next(), z = other.next();
    ASSERT_LE(x.rows(), 512u);
    ASSERT_GE(x.rows(), 511u);
    EXPECT_TRUE(std::ranges::equal(x.tokens, y.tokens));
    differs = differs || !std::ranges::equal(x.tokens, z.tokens);
    EXPECT_NO_THROW(validate_causal_lm_batch(x, pretrain_model_config(1)));
    for (int32_t t : x.tokens) ASSERT_NE(t, kReservedMaskToken);
    for (size_t d = 1; d < x.doc_offsets.size(); ++d)
      EXPECT_EQ(x.positions[size_t(x.doc_offsets[d - 1])], 0);
  }
  EXPECT_TRUE(differs);
  EXPECT_GE(a.epoch(), 1u);
}

TEST(PretrainTest, ShortRunLowersTheLossAndWritesALoadableFolder) {
  PretrainOptions o;
  o.out = scratch_dir("short");
  o.layers = 1;
  o.steps = 24;
  o.batch_tokens = 256;
  o.warmup_steps = 4;
  o.threads = 2;
  o.seconds = 0;  // no wall-clock cap: the step count is what is checked (TSan runs ~30x slower)
  const PretrainResult r = run_pretrain(o);
  EXPECT_EQ(r.steps, 24u);
  EXPECT_FALSE(r.stopped_by_time);
  EXPECT_NEAR(r.eval_loss_start, std::log(257.0), 0.25);  // nearly uniform logits
  EXPECT_LT(r.eval_loss_end, r.eval_loss_start - 1.0);
  EXPECT_LT(r.last_loss, r.first_loss - 1.0);
  EXPECT_TRUE(fs::exists(o.out / kPretrainMarker));
  EXPECT_NO_THROW(open_cpu_model(o.out.string()));
  // A second run may replace a previous output.
  o.steps = 2;
  EXPECT_NO_THROW(run_pretrain(o));
  fs::remove_all(o.out);
}

TEST(PretrainTest, TheTimeCapEndsARunEarlyAndStillWritesTheFolder) {
  PretrainOptions o;
  o.out = scratch_dir("capped");
  o.layers = 1;
  o.steps = 1'000'000;  // far more than 0.2 s holds on any machine
  o.batch_tokens = 64;
  o.threads = 2;
  o.seconds = 0.2;
  const PretrainResult r = run_pretrain(o);
  EXPECT_TRUE(r.stopped_by_time);
  EXPECT_GE(r.steps, 1u);  // a capped run still makes one update
  EXPECT_LT(r.steps, o.steps);
  EXPECT_TRUE(fs::exists(o.out / kPretrainMarker));
  EXPECT_NO_THROW(open_cpu_model(o.out.string()));
  fs::remove_all(o.out);
}

TEST(PretrainTest, RefusesAnOutThatIsNotAPreviousOutput) {
  const fs::path dir = scratch_dir("refuse");
  fs::create_directories(dir);
  check_pretrain_out(dir);  // an empty folder is fine
  std::ofstream(dir / "notes.txt") << "keep me";
  EXPECT_EQ(thrown_code([&] { check_pretrain_out(dir); }), Errc::kModel);
  PretrainOptions o;
  o.out = dir;
  o.steps = 1;
  EXPECT_EQ(thrown_code([&] { run_pretrain(o); }), Errc::kModel);
  EXPECT_TRUE(fs::exists(dir / "notes.txt"));
  EXPECT_FALSE(fs::exists(dir / "config.json"));

  const fs::path file = dir / "notes.txt";
  EXPECT_EQ(thrown_code([&] { check_pretrain_out(file); }), Errc::kModel);
  o.out = file;
  EXPECT_EQ(thrown_code([&] { run_pretrain(o); }), Errc::kModel);
  o.out = dir / "fresh";
  o.steps = 0;
  EXPECT_EQ(thrown_code([&] { run_pretrain(o); }), Errc::kModelBadConfig);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hsring::train
