#include "model/cpu_delta_net.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/cpu_target_model.h"

namespace hsring {
namespace {

TEST(CpuDeltaNetTest, RecurrenceByHand) {
  // One head, keys and queries of 2, values of 1. Rows are q | k | v; k is already unit
  // (its L2 norm changes it by 5e-7), q is scaled by 1 / sqrt(2) after its norm.
  //   t1: decay 1,   beta 0.5, k (1,0), v 2: delta = 0.5 (2 - 0) = 1, S = (1, 0),
  //       q (1,0): out = 1 / sqrt 2
  //   t2: decay 0.5, beta 1,   k (0,1), v 4: S = (0.5, 0), delta = 4 - 0 = 4, S = (0.5, 4),
  //       q (0,1): out = 4 / sqrt 2
  //   t3: decay 1,   beta 1,   k (1,0), v 1: delta = 1 - 0.5 = 0.5, S = (1, 4),
  //       q (1,1) -> (0.5, 0.5): out = 0.5 + 2 = 2.5
  //   t4: a new document, as t1: S starts from zero again, out = 1 / sqrt 2.
  DeltaNetShape shape{1, 1, 2, 1, 4};
  std::vector<float> qkv = {1, 0, 1, 0, 2, 0, 1, 0, 1, 4, 1, 1, 1, 0, 1, 1, 0, 1, 0, 2};
  const std::vector<float> g = {0, std::log(0.5f), 0, 0};
  const std::vector<float> beta = {0.5f, 1, 1, 0.5f};
  const std::vector<int32_t> offsets = {0, 3, 4};
  std::vector<float> out(4);
  gated_delta_rule(qkv.data(), g.data(), beta.data(), 4, shape, offsets, out.data(), 1);
  EXPECT_NEAR(out[0], 1 / std::sqrt(2.0), 1e-5);
  EXPECT_NEAR(out[1], 4 / std::sqrt(2.0), 1e-5);
  EXPECT_NEAR(out[2], 2.5, 1e-5);
  EXPECT_NEAR(out[3], 1 / std::sqrt(2.0), 1e-5);
}

TEST(CpuDeltaNetTest, ConvolutionIsCausalWithinEachDocument) {
  // Kernel 2, w = (0.5, 1): y_t = silu(0.5 x_{t-1} + x_t), x_{t-1} = 0 at a document start.
  const std::vector<float> x = {1, 2, 3};
  const std::vector<float> w = {0.5f, 1};
  const std::vector<int32_t> offsets = {0, 2, 3};
  std::vector<float> y(3);
  causal_conv_silu(x.data(), 1, w.data(), 2, offsets, y.data());
  const auto silu = [](double v) { return v / (1 + std::exp(-v)); };
  EXPECT_NEAR(y[0], silu(1.0), 1e-6);
  EXPECT_NEAR(y[1], silu(2.5), 1e-6);
  EXPECT_NEAR(y[2], silu(3.0), 1e-6);  // not 0.5 * 2 + 3: the previous document is unseen
}

TEST(CpuDeltaNetTest, GatesAndGatedNorm) {
  std::vector<float> a = {0, 25}, b = {0, 2};
  const std::vector<float> a_log = {0}, dt_bias = {0};
  delta_gates(a.data(), b.data(), 2, 1, a_log.data(), dt_bias.data());
  EXPECT_NEAR(a[0], -std::log(2.0), 1e-6);  // -exp(0) softplus(0)
  EXPECT_FLOAT_EQ(a[1], -25.0f);            // softplus(25) = 25 in fp32
  EXPECT_NEAR(b[0], 0.5, 1e-7);
  EXPECT_NEAR(b[1], 1 / (1 + std::exp(-2.0)), 1e-7);
  // (3, 4): rms 3.5355; times weight (1, 2) and silu(gate (0, 1)).
  const std::vector<float> x = {3, 4}, gate = {0, 1}, weight = {1, 2};
  std::vector<float> y(2);
  gated_rms_norm(x.data(), gate.data(), weight.data(), 1, 2, 0, y.data());
  EXPECT_NEAR(y[0], 0.0, 1e-7);
  EXPECT_NEAR(y[1], 2 * 4 / std::sqrt(12.5) / (1 + std::exp(-1.0)), 1e-6);
}

// A small hybrid model: a document's states do not depend on what is packed before it, in
// the DeltaNet layers (convolution and state) as in attention.
TEST(CpuDeltaNetTest, HybridDocumentsAreIndependentOfTheirNeighbours) {
  ModelConfig c = named_model_config("qwen3.6-27b");
  c.name = "small-hybrid";
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_layers = 4;
  c.layer_kinds.resize(4);
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 32;
  c.rotary_dim = 8;
  c.vocab_size = 97;
  c.delta_net = {2, 4, 16, 8, 4};
  ASSERT_EQ(validate_config(c), "");
  CpuTargetModel model(c, random_weights(c, 3), {1});
  const std::vector<int32_t> doc = {5, 9, 11, 2, 40, 41, 7, 7, 3};
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6};
  tokens.insert(tokens.end(), doc.begin(), doc.end());
  std::vector<int32_t> positions = {0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<int32_t> offsets = {0, 6, 15};
  const std::vector<int32_t> alone_positions(positions.begin() + 6, positions.end());
  const std::vector<int32_t> alone_offsets = {0, 9};
  ForwardRequest r;
  r.capture_layers = {0, 1, 2, 3};
  r.greedy = true;
  ForwardOutput packed, alone;
  model.forward({tokens, positions, offsets}, r, packed);
  model.forward({doc, alone_positions, alone_offsets}, r, alone);
  for (size_t k = 0; k < 4; ++k)
    EXPECT_EQ(std::vector<float>(packed.captured[k].begin() + 6 * 64, packed.captured[k].end()),
              alone.captured[k])
        << "layer " << k;
  EXPECT_EQ(std::vector<int32_t>(packed.greedy.begin() + 6, packed.greedy.end()), alone.greedy);
}

}  // namespace
}  // namespace hsring
