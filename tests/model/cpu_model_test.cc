#include "model/cpu_target_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "common/error.h"
#include "model/target_head.h"
#include "ops/argmax.h"
#include "ops/linear.h"
#include "ops/rms_norm.h"
#include "reference_forward.h"

namespace hsring {
namespace {

// A document: tokens and their positions (0.. unless a test says otherwise).
struct Doc {
  std::vector<int32_t> tokens;
};

struct Packed {
  std::vector<int32_t> tokens, positions, offsets{0};
  PackedBatch view() const { return {tokens, positions, offsets}; }
};

Packed pack(const std::vector<Doc>& docs) {
  Packed p;
  for (const Doc& d : docs) {
    for (size_t i = 0; i < d.tokens.size(); ++i) {
      p.tokens.push_back(d.tokens[i]);
      p.positions.push_back(int32_t(i));
    }
    p.offsets.push_back(int32_t(p.tokens.size()));
  }
  return p;
}

Doc make_doc(uint32_t length, uint32_t salt, uint32_t vocab) {
  Doc d;
  for (uint32_t i = 0; i < length; ++i)
    d.tokens.push_back(int32_t((i * 37 + salt * 101 + 7) % vocab));
  return d;
}

ForwardRequest all_layers(const ModelConfig& c, bool logits = false) {
  ForwardRequest r;
  r.capture_layers.resize(c.num_layers);
  std::iota(r.capture_layers.begin(), r.capture_layers.end(), 0);
  r.logits = logits;
  return r;
}

// Rows [begin, begin + n) of a [T, width] buffer.
std::vector<float> rows(const std::vector<float>& m, size_t width, size_t begin, size_t n) {
  return {m.begin() + long(begin * width), m.begin() + long((begin + n) * width)};
}

class CpuModelTest : public ::testing::TestWithParam<const char*> {
 protected:
  // "tiny" (Qwen3 style: QK-norm, tied head), "llama" (no QK-norm, untied, MHA) or "qwen2"
  // (q/k/v biases, no QK-norm, untied, GQA).
  ModelConfig config() const {
    ModelConfig c = named_model_config("tiny");
    if (std::string(GetParam()) == "qwen2") {
      c.model_type = "qwen2";
      c.qk_norm = false;
      c.qkv_bias = true;
      c.tie_embeddings = false;
      c.num_layers = 3;
    }
    if (std::string(GetParam()) == "llama") {
      c.model_type = "llama";
      c.qk_norm = false;
      c.tie_embeddings = false;
      c.num_kv_heads = c.num_heads;
      c.num_layers = 3;
    }
    return c;
  }
};

TEST_P(CpuModelTest, MatchesNaiveReferencePerDocument) {
  const ModelConfig c = config();
  CpuTargetModel model(c, random_weights(c, 42), {2});
  const std::vector<Doc> docs = {make_doc(9, 1, c.vocab_size), make_doc(1, 2, c.vocab_size),
                                 make_doc(14, 3, c.vocab_size)};
  const Packed p = pack(docs);
  ForwardOutput out;
  model.forward(p.view(), all_layers(c, true), out);
  ASSERT_EQ(out.token_count, p.tokens.size());
  ASSERT_EQ(out.captured.size(), c.num_layers);
  ASSERT_EQ(out.logits.size(), p.tokens.size() * c.vocab_size);

  double worst = 0;
  for (size_t d = 0; d < docs.size(); ++d) {
    const size_t start = size_t(p.offsets[d]);
    const std::vector<int32_t> positions(p.positions.begin() + long(start),
                                         p.positions.begin() + long(start + docs[d].tokens.size()));
    const test::ReferenceResult ref =
        test::reference_forward(c, model.weights(), docs[d].tokens, positions);
    for (uint32_t layer = 0; layer < c.num_layers; ++layer) {
      for (size_t t = 0; t < docs[d].tokens.size(); ++t) {
        for (size_t i = 0; i < c.hidden_size; ++i) {
          const double expect = ref.layer_outputs[layer][t][i];
          const double got = out.captured[layer][(start + t) * c.hidden_size + i];
          worst = std::max(worst, std::abs(got - expect) / (1 + std::abs(expect)));
          ASSERT_NEAR(got, expect, 1e-3 * (1 + std::abs(expect)))
              << "doc " << d << " layer " << layer << " token " << t << " dim " << i;
        }
      }
    }
    for (size_t t = 0; t < docs[d].tokens.size(); ++t) {
      const std::vector<double>& logits = ref.logits[t];
      for (size_t v = 0; v < c.vocab_size; ++v)
        ASSERT_NEAR(out.logits[(start + t) * c.vocab_size + v], logits[v],
                    1e-3 * (1 + std::abs(logits[v])));
      // The greedy label is the reference's argmax unless the top two are too close to call.
      std::vector<double> sorted = logits;
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      if (sorted[0] - sorted[1] > 1e-2) {
        const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
        EXPECT_EQ(out.greedy[start + t], best);
      }
    }
  }
  EXPECT_LT(worst, 1e-4);  // fp32 against double: far tighter than the assertion bound
}

TEST_P(CpuModelTest, DocumentsDoNotSeeEachOther) {
  const ModelConfig c = config();
  CpuTargetModel model(c, random_weights(c, 7), {1});
  const Doc second = make_doc(11, 5, c.vocab_size);
  const Packed a = pack({make_doc(8, 1, c.vocab_size), second});
  const Packed b = pack({make_doc(8, 9, c.vocab_size), second});  // document 1 changed
  ForwardOutput out_a, out_b;
  model.forward(a.view(), all_layers(c), out_a);
  model.forward(b.view(), all_layers(c), out_b);
  for (uint32_t layer = 0; layer < c.num_layers; ++layer) {
    EXPECT_EQ(rows(out_a.captured[layer], c.hidden_size, 8, 11),
              rows(out_b.captured[layer], c.hidden_size, 8, 11))
        << "document 2 changed with document 1 at layer " << layer;
    EXPECT_NE(rows(out_a.captured[layer], c.hidden_size, 0, 8),
              rows(out_b.captured[layer], c.hidden_size, 0, 8));
  }
  EXPECT_TRUE(std::equal(out_a.greedy.begin() + 8, out_a.greedy.end(), out_b.greedy.begin() + 8));
}

TEST_P(CpuModelTest, PackingOrderDoesNotChangeADocument) {
  const ModelConfig c = config();
  CpuTargetModel model(c, random_weights(c, 9), {2});
  const Doc x = make_doc(10, 3, c.vocab_size);
  const Doc y = make_doc(6, 4, c.vocab_size);
  ForwardOutput xy, yx, alone;
  model.forward(pack({x, y}).view(), all_layers(c), xy);
  model.forward(pack({y, x}).view(), all_layers(c), yx);
  model.forward(pack({x}).view(), all_layers(c), alone);
  for (uint32_t layer = 0; layer < c.num_layers; ++layer) {
    // Bit-identical: positions restart per document and no kernel depends on a row's place.
    EXPECT_EQ(rows(xy.captured[layer], c.hidden_size, 0, 10),
              rows(yx.captured[layer], c.hidden_size, 6, 10));
    EXPECT_EQ(rows(xy.captured[layer], c.hidden_size, 10, 6),
              rows(yx.captured[layer], c.hidden_size, 0, 6));
    EXPECT_EQ(rows(xy.captured[layer], c.hidden_size, 0, 10), alone.captured[layer]);
  }
}

TEST_P(CpuModelTest, PositionsDriveRope) {
  const ModelConfig c = config();
  CpuTargetModel model(c, random_weights(c, 9), {1});
  Packed p = pack({make_doc(6, 3, c.vocab_size)});
  ForwardOutput base, shifted;
  model.forward(p.view(), all_layers(c), base);
  for (int32_t& pos : p.positions) pos += 100;
  model.forward(p.view(), all_layers(c), shifted);
  // Token 0 attends only to itself: RoPE cancels in q.k, so a shift cannot change it...
  EXPECT_EQ(rows(base.captured[0], c.hidden_size, 0, 1),
            rows(shifted.captured[0], c.hidden_size, 0, 1));
  // ...but scores of the others depend on relative positions only: equal up to rounding.
  for (size_t i = c.hidden_size; i < 6 * c.hidden_size; ++i)
    EXPECT_NEAR(base.captured[0][i], shifted.captured[0][i], 1e-3);
  // Positions that do not restart change a second document.
  Packed two = pack({make_doc(4, 1, c.vocab_size), make_doc(4, 2, c.vocab_size)});
  ForwardOutput restart, running;
  model.forward(two.view(), all_layers(c), restart);
  std::iota(two.positions.begin(), two.positions.end(), 0);
  two.positions[4] = 7;  // not a uniform shift of the second document
  model.forward(two.view(), all_layers(c), running);
  EXPECT_NE(rows(restart.captured[0], c.hidden_size, 4, 4),
            rows(running.captured[0], c.hidden_size, 4, 4));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuModelTest, ::testing::Values("tiny", "llama", "qwen2"));

TEST(CpuModelConventionTest, LastCapturedLayerIsBeforeTheFinalNorm) {
  const ModelConfig c = named_model_config("tiny");
  CpuTargetModel model(c, random_weights(c, 1), {1});
  const Packed p = pack({make_doc(5, 1, c.vocab_size)});
  ForwardRequest r;
  r.capture_layers = {int32_t(c.num_layers) - 1};
  r.logits = true;
  ForwardOutput out;
  model.forward(p.view(), r, out);
  // final norm then the tied head applied to the captured state reproduces the logits.
  std::vector<float> normed(5 * c.hidden_size), logits(5 * c.vocab_size);
  ops::rms_norm_forward(out.captured[0].data(), model.weights().final_norm.data(), 5, c.hidden_size,
                        c.rms_norm_eps, normed.data(), ops::Sums::kFloat);
  ops::linear_forward(normed.data(), 5, c.hidden_size, model.weights().embed_tokens.data(),
                      c.vocab_size, logits.data(), ops::Sums::kFloat, 1);
  EXPECT_EQ(logits, out.logits);
  for (size_t t = 0; t < 5; ++t)
    EXPECT_EQ(out.greedy[t], ops::argmax(logits.data() + t * c.vocab_size, c.vocab_size));
}

TEST(CpuModelConventionTest, CaptureOrderFollowsTheRequest) {
  const ModelConfig c = named_model_config("tiny");
  CpuTargetModel model(c, random_weights(c, 1), {1});
  const Packed p = pack({make_doc(5, 1, c.vocab_size)});
  ForwardOutput all, some;
  model.forward(p.view(), all_layers(c), all);
  ForwardRequest r;
  r.capture_layers = {4, 1, 4};
  r.greedy = false;
  model.forward(p.view(), r, some);
  ASSERT_EQ(some.captured.size(), 3u);
  EXPECT_EQ(some.captured[0], all.captured[4]);
  EXPECT_EQ(some.captured[1], all.captured[1]);
  EXPECT_EQ(some.captured[2], all.captured[4]);
  EXPECT_TRUE(some.greedy.empty());
  EXPECT_TRUE(some.logits.empty());
}

TEST(CpuModelDeterminismTest, SameSeedSameBitsAcrossThreadCounts) {
  const ModelConfig c = named_model_config("tiny");
  CpuTargetModel one(c, random_weights(c, 123), {1});
  CpuTargetModel four(c, random_weights(c, 123), {4});
  CpuTargetModel other(c, random_weights(c, 124), {1});
  // Long enough that the matmuls and the attention really split across threads.
  const Packed p = pack({make_doc(60, 1, c.vocab_size), make_doc(40, 2, c.vocab_size)});
  ForwardOutput a, b, d;
  one.forward(p.view(), all_layers(c), a);
  four.forward(p.view(), all_layers(c), b);
  other.forward(p.view(), all_layers(c), d);
  EXPECT_EQ(a.captured, b.captured);
  EXPECT_EQ(a.greedy, b.greedy);
  EXPECT_NE(a.captured, d.captured);
  ForwardOutput again;
  one.forward(p.view(), all_layers(c), again);
  EXPECT_EQ(a.captured, again.captured);
  EXPECT_EQ(random_weights(c, 5).embed_tokens, random_weights(c, 5).embed_tokens);
}

// A drafter of a preset target reads the head random_weights draws, under the preset's own
// weight root: the Qwen3.5 / 3.6 hybrid's (model.language_model.) once gave no embedding,
// and `hsring run --model qwen3.6-27b` ended with its drafter's exit 2.
TEST(CpuModelTest, ARandomPresetsHeadIsTheOneItsWeightsHold) {
  ModelConfig untied = named_model_config("tiny");
  untied.tie_embeddings = false;
  ModelConfig hybrid = named_model_config("qwen3.6-27b");
  hybrid.hidden_size = 64;
  hybrid.intermediate_size = 96;
  hybrid.num_layers = 4;
  hybrid.layer_kinds.resize(4);
  hybrid.num_heads = 2;
  hybrid.num_kv_heads = 1;
  hybrid.head_dim = 32;
  hybrid.rotary_dim = 8;
  hybrid.vocab_size = 300;
  hybrid.delta_net = DeltaNetShape{2, 4, 16, 8, 4};
  ASSERT_EQ(hybrid.weight_prefix, "model.language_model.");
  for (const ModelConfig& c : {named_model_config("tiny"), untied, hybrid}) {
    SCOPED_TRACE(c.name);
    const ModelWeights w = random_weights(c, 5);
    const TargetHead head = random_target_head(c, 5);
    ASSERT_EQ(head.embed.size(), size_t(c.vocab_size) * c.hidden_size);
    EXPECT_EQ(head.embed, w.embed_tokens);
    EXPECT_EQ(head.lm_head, c.tie_embeddings ? std::vector<float>{} : w.lm_head);
  }
}

TEST(CpuModelInputTest, BadBatchesAndRequestsAreClearErrors) {
  const ModelConfig c = named_model_config("tiny");
  CpuTargetModel model(c, random_weights(c, 1), {1});
  ForwardOutput out;
  const auto error = [&](std::vector<int32_t> tokens, std::vector<int32_t> positions,
                         std::vector<int32_t> offsets, std::vector<int32_t> layers = {0}) {
    ForwardRequest r;
    r.capture_layers = layers;
    try {
      model.forward({tokens, positions, offsets}, r, out);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kModel);
      return std::string(e.what());
    }
    ADD_FAILURE() << "accepted";
    return std::string();
  };
  EXPECT_NE(error({}, {}, {0}).find("no tokens"), std::string::npos);
  EXPECT_NE(error({1, 2}, {0}, {0, 2}).find("2 tokens but 1 positions"), std::string::npos);
  EXPECT_NE(error({1, 2}, {0, 1}, {0, 1})
                .find("must run from 0 to the token count 2 (they run from 0 to 1)"),
            std::string::npos);
  EXPECT_NE(error({1, 2}, {0, 1}, {1, 2})
                .find("must run from 0 to the token count 2 (they run from 1 to 2)"),
            std::string::npos);
  EXPECT_NE(error({1, 2}, {0, 1}, {0, 1, 1, 2}).find("must increase"), std::string::npos);
  EXPECT_NE(error({1, 256}, {0, 1}, {0, 2}).find("token 1 is 256, outside the vocabulary"),
            std::string::npos);
  EXPECT_NE(error({1, -1}, {0, 1}, {0, 2}).find("outside the vocabulary"), std::string::npos);
  EXPECT_NE(error({1, 2}, {0, -1}, {0, 2}).find("negative"), std::string::npos);
  EXPECT_NE(error({1, 2}, {0, 1}, {0, 2}, {6}).find("capture layer 6 is outside [0, 6)"),
            std::string::npos);
}

TEST(CpuModelInputTest, WeightsThatDoNotFitTheConfigAreRejected) {
  const ModelConfig c = named_model_config("tiny");
  ModelWeights w = random_weights(c, 1);
  w.layers[2].up_proj.pop_back();
  try {
    CpuTargetModel model(c, std::move(w));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.2.mlp.up_proj.weight"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(open_cpu_model("no-such-shape"), Error);
  EXPECT_EQ(open_cpu_model("tiny", 3, {1})->config().name, "tiny");
}

}  // namespace
}  // namespace hsring
