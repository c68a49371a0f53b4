// The decoder layer's blocks (model/decoder_layer.h) against finite differences, in double:
// every feature a config can switch on that has a backward (QK-norm, q/k/v biases, grouped
// heads, a sliding window, partial RoPE, two documents), and the fp32 forward of the CPU
// target within float rounding of the double one.
#include "model/decoder_layer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "grad_check.h"
#include "ops/rope.h"

namespace hsring {
namespace {

using train::testing::check_gradient;
using train::testing::project;
using train::testing::random_values;
using train::testing::sample_indices;

constexpr double kTolerance = 1e-6;

DecoderLayerShape small_shape() {
  DecoderLayerShape s;
  s.hidden = 12;
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = 6;
  s.intermediate = 10;
  s.rotary_dim = 4;  // partial RoPE
  s.window = 3;
  s.eps = 1e-6;
  s.qk_norm = true;
  s.qkv_bias = true;
  return s;
}

// One flat buffer of every tensor of both blocks, and their offsets in it.
struct Tensors {
  size_t norm, q, k, v, o, q_bias, k_bias, v_bias, q_norm, k_norm, post_norm, gate, up, down;
  size_t total = 0;

  explicit Tensors(const DecoderLayerShape& s) {
    const auto add = [this](size_t n) {
      const size_t at = total;
      total += n;
      return at;
    };
    const size_t h = s.hidden, qd = s.q_dim(), kvd = s.kv_dim();
    norm = add(h);
    q = add(qd * h);
    k = add(kvd * h);
    v = add(kvd * h);
    o = add(h * qd);
    q_bias = add(qd);
    k_bias = add(kvd);
    v_bias = add(kvd);
    q_norm = add(s.head_dim);
    k_norm = add(s.head_dim);
    post_norm = add(h);
    gate = add(s.intermediate * h);
    up = add(s.intermediate * h);
    down = add(h * s.intermediate);
  }
  template <class P>
  AttentionBlockParams<P> attention(P b) const {
    return {b + norm,   b + q,      b + k,      b + v,      b + o,
            b + q_bias, b + k_bias, b + v_bias, b + q_norm, b + k_norm};
  }
  template <class P>
  MlpBlockParams<P> mlp(P b) const {
    return {b + post_norm, b + gate, b + up, b + down};
  }
};

struct Fixture {
  DecoderLayerShape shape = small_shape();
  Tensors at{shape};
  size_t rows = 7;
  std::vector<int32_t> offsets = {0, 4, 7};
  std::vector<int32_t> positions = {0, 1, 2, 3, 0, 1, 2};
  std::vector<double> params, x, c, cos, sin;

  Fixture() {
    params = random_values(at.total, 1, -0.5, 0.5);
    for (size_t off : {at.norm, at.post_norm})
      for (size_t i = 0; i < shape.hidden; ++i) params[off + i] += 1.0;
    x = random_values(rows * shape.hidden, 2);
    c = random_values(rows * shape.hidden, 3);
    cos.resize(rows * shape.rotary_dim / 2);
    sin.resize(cos.size());
    ops::rope_angles<double>(positions, shape.rotary_dim, 1e4, cos.data(), sin.data());
  }
};

TEST(DecoderLayerTest, AttentionBlockGradients) {
  Fixture f;
  AttentionBlockActivations<double> acts;
  std::vector<double> out(f.x.size());
  const auto forward = [&] {
    attention_block_forward(f.shape, f.at.attention<const double*>(f.params.data()), f.x.data(),
                            f.rows, f.offsets, f.cos.data(), f.sin.data(), acts, out.data(),
                            ops::Sums::kDouble, 1);
  };
  const auto loss = [&] {
    forward();
    return project(out, f.c);
  };
  forward();
  std::vector<double> grads(f.at.total, 0.0), dx = f.c;
  BlockGradScratch<double> scratch;
  attention_block_backward(f.shape, f.at.attention<const double*>(f.params.data()),
                           f.at.attention<double*>(grads.data()), f.x.data(), f.rows, f.offsets,
                           f.cos.data(), f.sin.data(), acts, dx.data(), scratch, 1);
  const auto gx = check_gradient(f.x, dx, loss, sample_indices(f.x.size(), f.x.size(), 0));
  EXPECT_LT(gx.max_error, kTolerance) << gx.describe("dx");
  // Every attention tensor, biases and QK-norm weights included (the MLP's stay zero).
  const size_t attention_end = f.at.post_norm;
  const auto gp = check_gradient(f.params, grads, loss, sample_indices(attention_end, 400, 4));
  EXPECT_LT(gp.max_error, kTolerance) << gp.describe("d attention params");
  for (size_t i = attention_end; i < f.at.total; ++i) EXPECT_EQ(grads[i], 0.0);
}

TEST(DecoderLayerTest, MlpBlockGradients) {
  Fixture f;
  MlpBlockActivations<double> acts;
  std::vector<double> out(f.x.size());
  const auto loss = [&] {
    mlp_block_forward(f.shape, f.at.mlp<const double*>(f.params.data()), f.x.data(), f.rows, acts,
                      out.data(), ops::Sums::kDouble, 1);
    return project(out, f.c);
  };
  loss();
  std::vector<double> grads(f.at.total, 0.0), dx = f.c;
  BlockGradScratch<double> scratch;
  mlp_block_backward(f.shape, f.at.mlp<const double*>(f.params.data()),
                     f.at.mlp<double*>(grads.data()), f.x.data(), f.rows, acts, dx.data(), scratch,
                     1);
  const auto gx = check_gradient(f.x, dx, loss, sample_indices(f.x.size(), f.x.size(), 0));
  EXPECT_LT(gx.max_error, kTolerance) << gx.describe("dx");
  std::vector<size_t> mlp_indices;
  for (size_t i = f.at.post_norm; i < f.at.total; ++i) mlp_indices.push_back(i);
  const auto gp = check_gradient(f.params, grads, loss, mlp_indices);
  EXPECT_LT(gp.max_error, kTolerance) << gp.describe("d MLP params");
}

TEST(DecoderLayerTest, FloatSumsForwardStaysWithinFloatRoundingOfDouble) {
  // The CPU target's forward (fp32 sums) and training's (double) describe one layer.
  Fixture f;
  const std::vector<float> params(f.params.begin(), f.params.end());
  const std::vector<float> x(f.x.begin(), f.x.end()), cos(f.cos.begin(), f.cos.end()),
      sin(f.sin.begin(), f.sin.end());
  AttentionBlockActivations<double> acts_d;
  MlpBlockActivations<double> mlp_d;
  std::vector<double> mid_d(f.x.size()), out_d(f.x.size());
  attention_block_forward(f.shape, f.at.attention<const double*>(f.params.data()), f.x.data(),
                          f.rows, f.offsets, f.cos.data(), f.sin.data(), acts_d, mid_d.data(),
                          ops::Sums::kDouble, 1);
  mlp_block_forward(f.shape, f.at.mlp<const double*>(f.params.data()), mid_d.data(), f.rows, mlp_d,
                    out_d.data(), ops::Sums::kDouble, 1);
  for (const ops::Sums sums : {ops::Sums::kFloat, ops::Sums::kDouble}) {
    AttentionBlockActivations<float> acts;
    MlpBlockActivations<float> mlp;
    std::vector<float> mid(x.size()), out(x.size());
    attention_block_forward(f.shape, f.at.attention<const float*>(params.data()), x.data(), f.rows,
                            f.offsets, cos.data(), sin.data(), acts, mid.data(), sums, 2);
    mlp_block_forward(f.shape, f.at.mlp<const float*>(params.data()), mid.data(), f.rows, mlp,
                      out.data(), sums, 2);
    for (size_t i = 0; i < out.size(); ++i)
      EXPECT_NEAR(out[i], out_d[i], 1e-5 * (1 + std::abs(out_d[i]))) << i;
  }
}

}  // namespace
}  // namespace hsring
