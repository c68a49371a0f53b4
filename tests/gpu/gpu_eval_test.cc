// `hsring eval --gpu`'s pieces on a GPU: the drafter's CUDA drafting
// (CudaDflashTrainer::draft) against the CPU DflashModel's predictions on the same features,
// and the batched GPU speculative decoder (eval/gpu_speculative_decode.h) against plain
// greedy decoding on the same GPU, on a Qwen3, a Llama and a Qwen3.5 hybrid target; and its
// seeded sampling (eval/sampling.h, docs/sampling.md): reproducible, and distributed as the
// GPU target's own sampling.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/random.h"
#include "eval/gpu_speculative_decode.h"
#include "eval/gpu_target_runner.h"
#include "eval/sampling.h"
#include "gpu/cuda_handles.h"
#include "gpu_test_util.h"
#include "model/cpu_target_model.h"
#include "model/cuda_kv_cache.h"
#include "model/model_weights.h"
#include "model_test_util.h"
#include "train/cuda_dflash_trainer.h"
#include "train/dflash_config.h"
#include "train/dflash_model.h"
#include "train/dflash_params.h"

namespace hsring {
namespace {

std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::vector<float> out(n);
  uint64_t state = seed;
  for (float& v : out)
    v = float(double(splitmix64(state) >> 11) / double(1ull << 53)) * 2.0f - 1.0f;
  return out;
}

ModelConfig target_config(const std::string& kind) {
  ModelConfig c = named_model_config("tiny");
  c.num_layers = 4;
  c.name = "test-" + kind;
  if (kind == "llama") {
    c.model_type = "llama";
    c.qk_norm = false;
    c.tie_embeddings = false;
    c.num_layers = 3;
  } else if (kind == "qwen2") {
    c.model_type = "qwen2";
    c.qk_norm = false;
    c.qkv_bias = true;
    c.num_layers = 3;
  } else if (kind == "qwen3_5") {
    c = named_model_config("qwen3.6-27b");
    c.name = "test-qwen3_5";
    c.hidden_size = 256;
    c.intermediate_size = 344;
    c.num_layers = 4;  // three DeltaNet layers, then an attention layer
    c.layer_kinds.resize(4);
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 256;
    c.rotary_dim = 64;
    c.vocab_size = 611;
    c.delta_net = DeltaNetShape{2, 4, 32, 16, 4};
  }
  return c;
}

// A drafter of `target` reading layers 0 and num_layers - 2: init's parameters from `seed`
// plus uniform noise of 0.3, so that its drafts vary from row to row (init's alone draft one
// token everywhere, which would make equal drafts say little).
checkpoint::DflashExport random_drafter(const ModelConfig& target, uint64_t seed) {
  checkpoint::DflashExport e;
  e.config = train::default_dflash_config(target, 2, 1);
  e.config.block_size = 8;
  e.layer_ids = {0, int32_t(target.num_layers) - 2};
  e.num_target_layers = target.num_layers;
  e.layout = train::dflash_param_layout(e.config);
  e.params.assign(e.layout.total, 0.0f);
  train::init_dflash_params<float>(e.layout, seed, e.params);
  const std::vector<float> noise = random_floats(e.params.size(), seed + 1);
  for (size_t i = 0; i < e.params.size(); ++i) e.params[i] += 0.3f * noise[i];
  return e;
}

// A temperature at which a random target's next token is uncertain. The tiny target ties its
// head to its embedding: a row's own token scores |e|^2 (about 74) against about 6.5 for the
// others, so it takes a far higher temperature than the untied targets to spread.
double hot_temperature(const std::string& kind) { return kind == "tiny" ? 30.0 : 6.0; }

TargetHead head_of(const ModelConfig& config, const ModelWeights& w) {
  return {config, w.embed_tokens, config.tie_embeddings ? std::vector<float>{} : w.lm_head};
}

std::vector<std::vector<int32_t>> prompts_for(const ModelConfig& c, size_t count, uint64_t seed) {
  std::vector<std::vector<int32_t>> prompts;
  uint64_t state = seed;
  for (size_t i = 0; i < count; ++i) {
    std::vector<int32_t> p(5 + 7 * i);  // different lengths: documents of every size
    for (int32_t& t : p) t = int32_t(splitmix64(state) % c.vocab_size);
    prompts.push_back(std::move(p));
  }
  return prompts;
}

// Drafting on the GPU from the features the CPU model gets: the same argmax in every row of
// blocks of the full size and of a shorter one (a decode's last block).
TEST(GpuEvalTest, CudaDraftingPredictsWhatTheCpuDrafterPredicts) {
  HSRING_REQUIRE_GPUS(1);
  const ModelConfig target = target_config("tiny");
  const ModelWeights w = random_weights(target, 3);
  checkpoint::DflashExport e = random_drafter(target, 9);
  const train::DflashConfig& dc = e.config;
  const std::vector<int32_t> offsets = {0, 30, 47, 90};
  const size_t rows = size_t(offsets.back()), width = dc.feature_dim();
  const std::vector<float> features = random_floats(rows * width, 5);
  std::vector<int32_t> tokens(rows), positions(rows);
  for (size_t d = 0; d + 1 < offsets.size(); ++d)
    for (int32_t r = offsets[d]; r < offsets[d + 1]; ++r) {
      tokens[size_t(r)] = int32_t((r * 37) % dc.vocab_size);
      positions[size_t(r)] = r - offsets[d];
    }
  const std::vector<int32_t> anchors = {29, 31, 46, 60, 89};
  const std::vector<int32_t> labels(rows, -1);

  train::DflashTrainerOptions options;
  options.model = dc;
  options.embed = w.embed_tokens;
  train::CudaDflashTrainer gpu_drafter(options, train::GemmPrecision::kFp32);
  const size_t total = e.params.size();
  gpu_drafter.load_state({e.params, std::vector<float>(total), std::vector<float>(total), 0});
  gpu::DeviceBuffer device = gpu::DeviceBuffer::allocate(features.size() * sizeof(float));
  ASSERT_EQ(cudaMemcpy(device.data(), features.data(), features.size() * sizeof(float),
                       cudaMemcpyHostToDevice),
            cudaSuccess);

  for (const uint32_t block : {dc.block_size, 3u}) {
    SCOPED_TRACE("block " + std::to_string(block));
    const std::vector<int32_t> drafted = gpu_drafter.draft({{}, tokens, positions, offsets, labels},
                                                           anchors, block, device.as<float>());
    train::DflashConfig cpu_config = dc;
    cpu_config.block_size = block;
    train::DflashModel cpu(cpu_config, {w.embed_tokens, w.lm_head_or_embeddings()}, 0, 1);
    std::copy(e.params.begin(), e.params.end(), cpu.params().begin());
    cpu.forward({features, tokens, positions, offsets, labels, anchors});
    const auto predictions = cpu.predictions();
    ASSERT_EQ(drafted.size(), anchors.size() * (block - 1));
    size_t distinct = 0;
    for (size_t b = 0; b < anchors.size(); ++b)
      for (size_t j = 1; j < block; ++j) {
        EXPECT_EQ(drafted[b * (block - 1) + j - 1], predictions[b * block + j])
            << "block " << b << " position " << j;
        distinct += predictions[b * block + j] != predictions[j];
      }
    EXPECT_GT(distinct, 0u) << "every row drafts the same token: the comparison says little";
    // With its logits (speculative sampling's q): the same drafts, each its row's argmax.
    std::vector<float> logits;
    EXPECT_EQ(gpu_drafter.draft({{}, tokens, positions, offsets, labels}, anchors, block,
                                device.as<float>(), &logits),
              drafted);
    ASSERT_EQ(logits.size(), drafted.size() * dc.vocab_size);
    for (size_t r = 0; r < drafted.size(); ++r) {
      const float* row = logits.data() + r * dc.vocab_size;
      EXPECT_EQ(std::max_element(row, row + dc.vocab_size) - row, drafted[r]) << "row " << r;
    }
  }
}

// DeviceCapture::logit_rows (what sampled decoding asks for): the chosen rows' logits, in
// the asked order, bit for bit those of a forward that keeps every row's.
TEST(GpuEvalTest, ChosenLogitRowsAreThoseOfTheFullForward) {
  HSRING_REQUIRE_GPUS(1);
  const ModelConfig c = target_config("tiny");
  CudaTargetModel target(c, random_weights(c, 3), 0);
  const auto prompts = prompts_for(c, 2, 5);
  std::vector<int32_t> tokens, positions, offsets = {0};
  for (const auto& p : prompts) {
    for (size_t i = 0; i < p.size(); ++i) {
      tokens.push_back(p[i]);
      positions.push_back(int32_t(i));
    }
    offsets.push_back(int32_t(tokens.size()));
  }
  const size_t rows = tokens.size(), vocab = c.vocab_size;
  ForwardRequest request;
  request.logits = true;
  gpu::DeviceBuffer greedy = gpu::DeviceBuffer::allocate(rows * sizeof(int32_t));
  gpu::DeviceBuffer all = gpu::DeviceBuffer::allocate(rows * vocab * sizeof(float));
  gpu::DeviceBuffer some = gpu::DeviceBuffer::allocate(3 * vocab * sizeof(float));
  DeviceCapture full;
  full.greedy = greedy.as<int32_t>();
  full.logits = all.as<float>();
  target.forward_device({tokens, positions, offsets}, request, nullptr, full);
  const std::vector<int32_t> chosen = {int32_t(rows) - 1, 0, 4};
  DeviceCapture picked = full;
  picked.logits = some.as<float>();
  picked.logit_rows = chosen;
  target.forward_device({tokens, positions, offsets}, request, nullptr, picked);
  std::vector<float> every(rows * vocab), three(3 * vocab);
  ASSERT_EQ(cudaMemcpy(every.data(), all.data(), every.size() * 4, cudaMemcpyDeviceToHost),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(three.data(), some.data(), three.size() * 4, cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (size_t i = 0; i < chosen.size(); ++i)
    EXPECT_TRUE(std::equal(three.begin() + std::ptrdiff_t(i * vocab),
                           three.begin() + std::ptrdiff_t((i + 1) * vocab),
                           every.begin() + std::ptrdiff_t(size_t(chosen[i]) * vocab)))
        << "row " << chosen[i];
  const std::vector<int32_t> outside = {int32_t(rows)};
  picked.logit_rows = outside;
  EXPECT_THROW(target.forward_device({tokens, positions, offsets}, request, nullptr, picked),
               Error);
}

class GpuDecoderTest : public ::testing::TestWithParam<std::string> {};

// The KV cache (model/cuda_kv_cache.h): two sequences fed in pieces through the cache (a
// prefill, then 1, then 7 tokens, in slots 1 and 0 of a cache of 3) give the captured layers
// and greedy tokens of one full forward over them, to bf16 rounding.
TEST(GpuEvalTest, ForwardsThroughTheKvCacheAreTheFullForward) {
  HSRING_REQUIRE_GPUS(1);
  for (const std::string kind : {"tiny", "llama"}) {
    SCOPED_TRACE(kind);
    const ModelConfig c = target_config(kind);
    CudaTargetModel target(c, random_weights(c, 2), 0);
    const auto prompts = prompts_for(c, 2, 8);  // 5 and 12 tokens
    std::vector<std::vector<int32_t>> seqs = prompts;
    uint64_t state = 77;
    for (auto& seq : seqs)
      for (int i = 0; i < 8; ++i) seq.push_back(int32_t(splitmix64(state) % c.vocab_size));
    const int32_t layer = int32_t(c.num_layers) - 1;
    const size_t h = c.hidden_size;
    ForwardRequest request;
    request.capture_layers = {layer};

    // The full forward: both sequences as two documents.
    std::vector<int32_t> tokens, positions, offsets = {0};
    for (const auto& seq : seqs) {
      for (size_t i = 0; i < seq.size(); ++i) {
        tokens.push_back(seq[i]);
        positions.push_back(int32_t(i));
      }
      offsets.push_back(int32_t(tokens.size()));
    }
    ForwardOutput full;
    target.forward({tokens, positions, offsets}, request, full);

    CudaKvCache cache(c, 3, 32);
    const int32_t slots[] = {1, 0};
    gpu::DeviceBuffer captured = gpu::DeviceBuffer::allocate(64 * h * sizeof(float));
    gpu::DeviceBuffer greedy = gpu::DeviceBuffer::allocate(64 * sizeof(int32_t));
    const std::vector<size_t> cuts[] = {{0, 5, 6, 13}, {0, 12, 13, 20}};  // per sequence
    for (size_t piece = 0; piece + 1 < cuts[0].size(); ++piece) {
      std::vector<int32_t> t, p, o = {0}, cached;
      std::vector<size_t> full_rows;  // each piece row's row in the full forward
      for (size_t d = 0; d < 2; ++d) {
        cached.push_back(int32_t(cuts[d][piece]));
        for (size_t i = cuts[d][piece]; i < cuts[d][piece + 1]; ++i) {
          t.push_back(seqs[d][i]);
          p.push_back(int32_t(i));
          full_rows.push_back(size_t(offsets[d]) + i);
        }
        o.push_back(int32_t(t.size()));
      }
      const CachedPrefix prefix{&cache, slots, cached};
      DeviceCapture out;
      out.dtype = DType::kFP32;
      out.layers = {{captured.data(), h * sizeof(float)}};
      out.greedy = greedy.as<int32_t>();
      target.forward_device({t, p, o}, request, nullptr, out, &prefix);
      std::vector<float> rows(t.size() * h);
      std::vector<int32_t> labels(t.size());
      ASSERT_EQ(cudaMemcpy(rows.data(), captured.data(), rows.size() * 4, cudaMemcpyDeviceToHost),
                cudaSuccess);
      ASSERT_EQ(cudaMemcpy(labels.data(), greedy.data(), labels.size() * 4, cudaMemcpyDeviceToHost),
                cudaSuccess);
      size_t same = 0;
      for (size_t r = 0; r < t.size(); ++r) {
        float scale = 0, worst = 0;
        for (size_t i = 0; i < h; ++i) {
          const float want = full.captured[0][full_rows[r] * h + i];
          scale = std::max(scale, std::abs(want));
          worst = std::max(worst, std::abs(rows[r * h + i] - want));
        }
        EXPECT_LE(worst, 2e-2f * scale) << "piece " << piece << " row " << r;
        same += labels[r] == full.greedy[full_rows[r]];
      }
      EXPECT_GE(same + 1, t.size()) << "piece " << piece;  // one near-tie may flip
    }
  }
}

// Speculative decoding on the GPU gives plain greedy decoding's tokens on the same GPU, for
// every prompt of a group, whatever the group; its accounting adds up.
TEST_P(GpuDecoderTest, SpeculativeDecodingIsGreedyDecoding) {
  HSRING_REQUIRE_GPUS(1);
  const ModelConfig c = target_config(GetParam());
  const ModelWeights w = random_weights(c, 11);
  CudaTargetModel target(c, w, 0);
  const checkpoint::DflashExport e = random_drafter(c, 4);
  const auto prompts = prompts_for(c, 5, 21);
  const uint32_t new_tokens = 19;  // not a multiple of the block: the last blocks are cut

  eval::GpuSpeculativeDecoder together(target, e, head_of(c, w), 4);
  const auto greedy = together.greedy(prompts, new_tokens);
  const auto speculative = together.speculative(prompts, new_tokens);
  eval::GpuSpeculativeDecoder alone(target, e, head_of(c, w), 1);
  const auto one_by_one = alone.speculative(prompts, new_tokens);
  ASSERT_EQ(speculative.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    EXPECT_EQ(greedy[i].size(), new_tokens);
    EXPECT_EQ(speculative[i].tokens, greedy[i]);
    EXPECT_EQ(one_by_one[i].tokens, greedy[i]);
    EXPECT_EQ(one_by_one[i].produced, speculative[i].produced);
    const uint32_t produced =
        std::accumulate(speculative[i].produced.begin(), speculative[i].produced.end(), 0u);
    EXPECT_EQ(produced + 1, new_tokens) << "the prefill's token, then each step's";
    EXPECT_EQ(speculative[i].verified[0], speculative[i].produced.size());
  }
}

// Greedy decoding on the GPU (`hsring data generate --gpu`) with a stop token: each
// prompt's output is its unstopped output up to and including the token's first occurrence,
// while the other prompts of the group go on (through the KV cache, and without one).
TEST_P(GpuDecoderTest, GreedyDecodingStopsAtAStopTokenAndTheOthersGoOn) {
  HSRING_REQUIRE_GPUS(1);
  const ModelConfig c = target_config(GetParam());
  CudaTargetModel target(c, random_weights(c, 5), 0);
  eval::GpuTargetRunner runner(target, {});
  EXPECT_EQ(runner.cached(), GetParam() != "qwen3_5");
  const auto prompts = prompts_for(c, 6, 3);
  const auto full = runner.greedy_decode(prompts, 24, {}, 4);
  const int32_t stop = full[0][5];  // prompt 0 stops at its 6th token at the latest
  const std::vector<int32_t> stops = {stop};
  const auto stopped = runner.greedy_decode(prompts, 24, stops, 4);
  size_t shorter = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(full[i].size(), 24u);
    auto end = std::find(full[i].begin(), full[i].end(), stop);
    if (end != full[i].end()) ++end;
    EXPECT_EQ(stopped[i], std::vector<int32_t>(full[i].begin(), end)) << "prompt " << i;
    shorter += stopped[i].size() < 24;
  }
  EXPECT_GE(shorter, 1u);
}

// Speculative sampling on the GPU (`hsring eval --gpu --temperature`) and plain sampling
// (`hsring data generate --gpu --temperature`). The GPU target computes in bf16 and the CPU
// one in fp32, so the same seed cannot give the CPU's tokens; instead: the same seed gives
// the same tokens in a group of four and one by one, another seed others, temperature 1e-6
// gives greedy decoding's tokens, and the emitted tokens are distributed as the GPU
// target's own sampling (below).
TEST_P(GpuDecoderTest, SampledDecodingIsSeededAndNearZeroTemperatureIsGreedy) {
  HSRING_REQUIRE_GPUS(1);
  const ModelConfig c = target_config(GetParam());
  const ModelWeights w = random_weights(c, 11);
  CudaTargetModel target(c, w, 0);
  const checkpoint::DflashExport e = random_drafter(c, 4);
  const auto prompts = prompts_for(c, 5, 21);
  const uint32_t new_tokens = 19;
  const double t = hot_temperature(GetParam());
  const eval::SamplingOptions hot{t, 0.95, 7}, other{t, 0.95, 8}, cold{1e-6, 1.0, 7};

  eval::GpuSpeculativeDecoder together(target, e, head_of(c, w), 4);
  eval::GpuSpeculativeDecoder alone(target, e, head_of(c, w), 1);
  const auto greedy = together.greedy(prompts, new_tokens);
  const auto sampled = together.speculative(prompts, new_tokens, hot);
  const auto again = alone.speculative(prompts, new_tokens, hot);
  const auto reseeded = together.speculative(prompts, new_tokens, other);
  const auto near_zero = together.speculative(prompts, new_tokens, cold);
  const auto plain = together.greedy(prompts, new_tokens, hot);
  const auto plain_alone = alone.greedy(prompts, new_tokens, hot);
  size_t differs = 0, differs_from_greedy = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    ASSERT_EQ(sampled[i].tokens.size(), new_tokens);
    EXPECT_EQ(again[i].tokens, sampled[i].tokens);
    EXPECT_EQ(again[i].produced, sampled[i].produced);
    EXPECT_EQ(near_zero[i].tokens, greedy[i]);
    EXPECT_EQ(plain[i].size(), new_tokens);
    EXPECT_EQ(plain_alone[i], plain[i]);
    const uint32_t produced =
        std::accumulate(sampled[i].produced.begin(), sampled[i].produced.end(), 0u);
    EXPECT_EQ(produced + 1, new_tokens);
    differs += reseeded[i].tokens != sampled[i].tokens;
    differs_from_greedy += sampled[i].tokens != greedy[i];
  }
  EXPECT_GT(differs, 0u) << "another seed gave every prompt the same tokens";
  EXPECT_GT(differs_from_greedy, 0u)
      << "sampling at temperature " << t << " gave greedy decoding's tokens";
}

// Distributionally sound on the GPU: one prompt decoded 3000 times (each copy its own
// prompt index, so its own draws) to 2 new tokens, the second settled by the acceptance rule
// against one sampled draft. The pairs' counts match N p(t1) p(t2 | t1), computed from the
// GPU target's own logits (chi-square; unlikely pairs pooled).
TEST_P(GpuDecoderTest, SpeculativeSamplingEmitsTheTargetsDistribution) {
  HSRING_REQUIRE_GPUS(1);
  const ModelConfig c = target_config(GetParam());
  const ModelWeights w = random_weights(c, 11);
  CudaTargetModel target(c, w, 0);
  const checkpoint::DflashExport e = random_drafter(c, 4);
  const std::vector<int32_t> prompt = prompts_for(c, 2, 33)[1];
  // No top-p and a high temperature: enough pairs of enough mass for a test on every target.
  const eval::SamplingOptions o{hot_temperature(GetParam()) * 2 / 3, 1.0, 11};
  constexpr size_t kCopies = 3000;
  const std::vector<std::vector<int32_t>> copies(kCopies, prompt);
  eval::GpuSpeculativeDecoder decoder(target, e, head_of(c, w), 500);
  const auto results = decoder.speculative(copies, 2, o);
  std::map<std::pair<int32_t, int32_t>, uint64_t> counts;
  uint64_t accepted = 0;
  for (const eval::SpeculativeResult& r : results) {
    ASSERT_EQ(r.tokens.size(), 2u);
    ++counts[{r.tokens[0], r.tokens[1]}];
    accepted += r.accepted[1];
  }

  // p(t1) from the prompt's last row, p(t2 | t1) for every t1 from one packed forward over
  // prompt + t1 (a document each).
  const size_t vocab = c.vocab_size;
  eval::GpuTargetRunner runner(target, {});
  runner.prepare(uint32_t(vocab) + 1, uint32_t(prompt.size()) + 1);
  eval::PackedDocs docs;
  std::vector<int32_t> slots, no_prefix, last_rows;
  for (size_t t1 = 0; t1 <= vocab; ++t1) {  // document vocab: the prompt alone
    std::vector<int32_t> doc = prompt;
    if (t1 < vocab) doc.push_back(int32_t(t1));
    docs.add(doc);
    slots.push_back(int32_t(t1));
    no_prefix.push_back(0);
    last_rows.push_back(docs.end(t1) - 1);
  }
  runner.forward(docs, slots, no_prefix, false, last_rows);
  std::vector<double> p1, p2;
  eval::sampling_distribution(runner.logits_row(vocab), o, p1);
  // Cells: a pair expected >= 5 times is its own; the others pool by (t1 mod 4, t2 mod 4),
  // and pools expected < 5 times into one last cell. The partition does not look at the
  // counts.
  std::map<std::pair<int64_t, int64_t>, std::pair<double, uint64_t>> cells;  // expected, seen
  const auto cell_of = [&](size_t t1, size_t t2, double mass) {
    return mass * kCopies >= 5 ? std::pair<int64_t, int64_t>(t1, t2)
                               : std::pair<int64_t, int64_t>(-1 - int64_t(t1 % 4), t2 % 4);
  };
  std::vector<std::vector<double>> p2_of(vocab);
  for (size_t t1 = 0; t1 < vocab; ++t1) {
    eval::sampling_distribution(runner.logits_row(t1), o, p2_of[t1]);
    for (size_t t2 = 0; t2 < vocab; ++t2) {
      const double mass = p1[t1] * p2_of[t1][t2];
      if (mass > 0) cells[cell_of(t1, t2, mass)].first += mass * kCopies;
    }
  }
  // A pair of probability 0 here can only be a token at the edge of the top-p set, which
  // the decoder's forward (through the KV cache, bf16) may draw a hair differently.
  uint64_t impossible = 0;
  for (const auto& [pair, n] : counts) {
    const auto t1 = size_t(pair.first), t2 = size_t(pair.second);
    const double mass = p1[t1] * p2_of[t1][t2];
    if (mass == 0) impossible += n;
    cells[cell_of(t1, t2, mass)].second += n;
  }
  EXPECT_LE(impossible, 3u) << "pairs the target's sampling never emits";
  std::vector<uint64_t> observed;
  std::vector<double> expected;
  double rest_expected = 0;
  uint64_t rest_seen = 0, own = 0;
  for (const auto& [key, cell] : cells) {
    if (cell.first < 5) {
      rest_expected += cell.first;
      rest_seen += cell.second;
      continue;
    }
    expected.push_back(cell.first);
    observed.push_back(cell.second);
    own += key.first >= 0;
  }
  expected.push_back(rest_expected);
  observed.push_back(rest_seen);
  ASSERT_GE(observed.size(), 4u) << "too few cells for a test";
  double chi = 0;
  for (size_t i = 0; i < observed.size(); ++i)
    if (expected[i] > 0)
      chi +=
          (double(observed[i]) - expected[i]) * (double(observed[i]) - expected[i]) / expected[i];
  // P(chi-square > df + 4.5 sqrt(2 df) + 10) < 0.001 for every df here (Wilson-Hilferty).
  const double df = double(observed.size() - 1);
  std::printf(
      "%s: %zu cells (%llu single pairs), chi-square %.1f (df %.0f), %llu of %zu drafts "
      "accepted\n",
      GetParam().c_str(), observed.size(), static_cast<unsigned long long>(own), chi, df,
      static_cast<unsigned long long>(accepted), kCopies);
  EXPECT_LT(chi, df + 4.5 * std::sqrt(2 * df) + 10);
}

INSTANTIATE_TEST_SUITE_P(Targets, GpuDecoderTest, ::testing::Values("tiny", "llama", "qwen3_5"));

// `hsring data generate --gpu` (GpuTargetRunner::greedy_decode, bf16) against the fp32 CPU
// target on the same weights, on the four architectures: every token the GPU chose is the
// CPU's argmax after the same prefix, except where the CPU's two best logits lie within
// bf16's reach of each other (a near-tie, which either may take). bf16's reach on a row is
// what rounding the weights alone moves its logits, measured by the CPU itself: twice the
// largest move (the GPU rounds its activations too), and at least 3 % of the row's RMS. On
// the dense shapes that is about 0.5 % of their scale; the Qwen3.5 shape's gated RMSNorm
// over a DeltaNet output near zero magnifies it several times (CudaModelTest). Random
// weights make near-ties common; they must stay the exception.
class GpuGreedyTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuGreedyTest, GreedyDecodingIsTheCpuTargetsWhereItsChoiceIsClear) {
  HSRING_REQUIRE_GPUS(1);
  const ModelConfig c = target_config(GetParam());
  const ModelWeights w = random_weights(c, 21);
  CudaTargetModel target(c, w, 0);
  CpuTargetModel cpu(c, w, {1});
  CpuTargetModel cpu_bf16_weights(c, gpu_test::bf16_weights(c, w), {1});
  const auto prompts = prompts_for(c, 6, 41);
  constexpr uint32_t kNew = 24;
  eval::GpuTargetRunner runner(target, {});
  const auto continued = runner.greedy_decode(prompts, kNew, {}, 4);
  size_t clear = 0, ties = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    ASSERT_EQ(continued[i].size(), kNew);
    // The CPU's logits along the GPU's path: one forward over prompt + continuation.
    std::vector<int32_t> tokens = prompts[i], positions;
    tokens.insert(tokens.end(), continued[i].begin(), continued[i].end());
    for (size_t p = 0; p < tokens.size(); ++p) positions.push_back(int32_t(p));
    const std::vector<int32_t> offsets = {0, int32_t(tokens.size())};
    ForwardRequest request;
    request.logits = true;
    ForwardOutput out, rounded;
    cpu.forward({tokens, positions, offsets}, request, out);
    cpu_bf16_weights.forward({tokens, positions, offsets}, request, rounded);
    const size_t vocab = c.vocab_size;
    for (size_t j = 0; j < kNew; ++j) {
      const size_t at = (prompts[i].size() - 1 + j) * vocab;
      const float* row = out.logits.data() + at;
      const float* row_rounded = rounded.logits.data() + at;
      const auto best = size_t(std::max_element(row, row + vocab) - row);
      double squares = 0, moved = 0;
      float second = -INFINITY;
      for (size_t v = 0; v < vocab; ++v) {
        squares += double(row[v]) * row[v];
        moved = std::max(moved, std::fabs(double(row_rounded[v]) - row[v]));
        if (v != best) second = std::max(second, row[v]);
      }
      const double reach = std::max(0.03 * std::sqrt(squares / double(vocab)), 2 * moved);
      const bool tie = double(row[best]) - second < reach;
      if (!tie) {
        ++clear;
        EXPECT_EQ(continued[i][j], int32_t(best))
            << "token " << j << ": a clear choice (the CPU's best leads by "
            << double(row[best]) - second << ", a tie is within " << reach << "; the GPU's token "
            << double(row[best]) - double(row[continued[i][j]]) << " below it)";
      } else {
        ++ties;
        EXPECT_GE(double(row[continued[i][j]]), double(row[best]) - reach) << "token " << j;
      }
    }
  }
  std::printf("%s: %zu clear choices, %zu near-ties\n", GetParam().c_str(), clear, ties);
  EXPECT_GT(clear, 4 * ties) << "near-ties should be the exception";
}

INSTANTIATE_TEST_SUITE_P(Architectures, GpuGreedyTest,
                         ::testing::Values("tiny", "llama", "qwen2", "qwen3_5"));

}  // namespace
}  // namespace hsring
