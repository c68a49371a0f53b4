// The ops' forwards on hand values, and the fp32 sums (Sums::kFloat) of the CPU target's
// forward: linear_forward gives each element exactly dot() of its row and column.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/argmax.h"
#include "ops/attention.h"
#include "ops/dot.h"
#include "ops/linear.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"

namespace hsring {
namespace {

constexpr ops::Sums kFloat = ops::Sums::kFloat;

TEST(OpsForwardTest, RmsNormHandValues) {
  const std::vector<float> x = {1, 2, 3, 4};
  const std::vector<float> w = {1, 1, 2, 0.5f};
  std::vector<float> y(4);
  // mean(x^2) = 7.5; + eps 0.5 = 8: every x is divided by sqrt(8).
  ops::rms_norm_forward(x.data(), w.data(), 1, 4, 0.5, y.data(), kFloat);
  EXPECT_NEAR(y[0], 0.35355339f, 1e-6);
  EXPECT_NEAR(y[1], 0.70710678f, 1e-6);
  EXPECT_NEAR(y[2], 2.12132034f, 1e-6);
  EXPECT_NEAR(y[3], 0.70710678f, 1e-6);
  // In place and per row: the second row is the first one scaled, so it normalises the same.
  std::vector<float> two = {1, 2, 3, 4, 10, 20, 30, 40};
  ops::rms_norm_forward(two.data(), w.data(), 2, 4, 0.0, two.data(), kFloat);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(two[i], two[4 + i], 1e-6);
}

TEST(OpsForwardTest, RopeHandValues) {
  // head_dim 4, theta 10000: frequencies 1 and 0.01; pairs (0, 2) and (1, 3).
  const std::vector<int32_t> positions = {0, 1};
  std::vector<float> cos(4), sin(4);
  ops::rope_angles(positions, 4, 10000.0, cos.data(), sin.data());
  EXPECT_FLOAT_EQ(cos[0], 1.0f);
  EXPECT_FLOAT_EQ(sin[1], 0.0f);
  EXPECT_FLOAT_EQ(cos[2], float(std::cos(1.0)));
  EXPECT_FLOAT_EQ(sin[3], float(std::sin(0.01)));
  std::vector<float> x = {1, 2, 3, 4, 1, 2, 3, 4};
  ops::rope_forward(x.data(), {2, 1, 4}, cos.data(), sin.data(), kFloat);
  EXPECT_FLOAT_EQ(x[0], 1);  // position 0: unchanged
  EXPECT_FLOAT_EQ(x[3], 4);
  EXPECT_NEAR(x[4], -1.98411065f, 1e-6);
  EXPECT_NEAR(x[5], 1.95990067f, 1e-6);
  EXPECT_NEAR(x[6], 2.46237790f, 1e-6);
  EXPECT_NEAR(x[7], 4.01979967f, 1e-6);
}

TEST(OpsForwardTest, RopeScoresDependOnRelativePositionOnly) {
  const size_t d = 8;
  const std::vector<float> q0 = {0.3f, -1, 2, 0.5f, 1, -0.25f, 0.75f, 1.5f};
  const std::vector<float> k0 = {1, 0.5f, -0.5f, 2, -1, 0.25f, 1.25f, -0.75f};
  const auto score = [&](int32_t pq, int32_t pk) {
    std::vector<int32_t> pos = {pq, pk};
    std::vector<float> cos(d), sin(d);
    ops::rope_angles(pos, d, 10000.0, cos.data(), sin.data());
    std::vector<float> q = q0, k = k0;
    ops::rope_forward(q.data(), {1, 1, d}, cos.data(), sin.data(), kFloat);
    ops::rope_forward(k.data(), {1, 1, d}, cos.data() + d / 2, sin.data() + d / 2, kFloat);
    return ops::dot(q.data(), k.data(), d);
  };
  EXPECT_NEAR(score(5, 2), score(103, 100), 1e-4);
  EXPECT_NEAR(score(7, 7), score(0, 0), 1e-5);
}

TEST(OpsForwardTest, SwigluHandValues) {
  const std::vector<float> gate = {0, 1, -1, 2};
  const std::vector<float> up = {1, 2, 3, 4};
  std::vector<float> out(4);
  ops::swiglu_forward(gate.data(), up.data(), 4, out.data(), kFloat);
  EXPECT_FLOAT_EQ(out[0], 0);
  EXPECT_NEAR(out[1], 1.46211716f, 1e-6);
  EXPECT_NEAR(out[2], -0.80682426f, 1e-6);
  EXPECT_NEAR(out[3], 7.04637662f, 1e-6);
}

TEST(OpsForwardTest, LinearMatchesNaiveProduct) {
  const size_t rows = 3, in = 19, out = 37;  // odd sizes: tails of the 8 lanes and the blocks
  std::vector<float> x(rows * in), w(out * in), y(rows * out);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 7) - 3) * 0.5f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i % 5) - 2) * 0.25f;
  ops::linear_forward(x.data(), rows, in, w.data(), out, y.data(), kFloat, 4);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t o = 0; o < out; ++o) {
      double expect = 0;
      for (size_t i = 0; i < in; ++i) expect += double(x[r * in + i]) * w[o * in + i];
      EXPECT_FLOAT_EQ(y[r * out + o], float(expect)) << r << " " << o;  // exact: small dyadics
    }
  }
  // With inexact values too, each element is bit for bit dot() of its row and column,
  // whichever group of four it was computed in.
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i));
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::cos(float(i) * 0.7f);
  ops::linear_forward(x.data(), rows, in, w.data(), out, y.data(), kFloat, 1);
  for (size_t r = 0; r < rows; ++r)
    for (size_t o = 0; o < out; ++o)
      EXPECT_EQ(y[r * out + o], ops::dot(x.data() + r * in, w.data() + o * in, in))
          << r << " " << o;
}

TEST(OpsForwardTest, AttentionStaysInsideDocuments) {
  // Two heads sharing one KV head; documents [0, 1) and [1, 3); head_dim 2.
  const std::vector<float> q = {1, 0, 0, 1, 0, 1, 1, 0, 1, 1, 2, 0};
  const std::vector<float> k = {5, 5, 1, 0, 0, 1};
  const std::vector<float> v = {100, 200, 1, 2, 3, 4};
  const std::vector<int32_t> offsets = {0, 1, 3};
  std::vector<float> out(3 * 4);
  ops::attention_forward(q.data(), k.data(), v.data(), {3, 2, 1, 2}, offsets, out.data(), nullptr,
                         kFloat, 1);
  // Token 0 and token 1 see only themselves: their own value, for both heads.
  EXPECT_FLOAT_EQ(out[0], 100);
  EXPECT_FLOAT_EQ(out[3], 200);
  EXPECT_FLOAT_EQ(out[4], 1);
  EXPECT_FLOAT_EQ(out[7], 2);
  // Token 2, head 0: q = (1, 1), keys (1, 0) and (0, 1) score equally: the mean value.
  EXPECT_NEAR(out[8], 2.0f, 1e-6);
  EXPECT_NEAR(out[9], 3.0f, 1e-6);
  // Head 1: q = (2, 0): scores 2 / sqrt(2) and 0.
  const double p = 1 / (1 + std::exp(-std::sqrt(2.0)));
  EXPECT_NEAR(out[10], p * 1 + (1 - p) * 3, 1e-5);
  EXPECT_NEAR(out[11], p * 2 + (1 - p) * 4, 1e-5);
}

TEST(OpsForwardTest, ArgmaxTakesFirstOfTiesAndSkipsNaN) {
  const std::vector<float> x = {1, 3, NAN, 3, -1};
  EXPECT_EQ(ops::argmax(x.data(), x.size()), 1);
  const std::vector<float> y = {NAN, -5, -2};
  EXPECT_EQ(ops::argmax(y.data(), y.size()), 2);
}

}  // namespace
}  // namespace hsring
