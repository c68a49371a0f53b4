#include "model/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "common/contract.h"

namespace hsring {
namespace {

RopeScaling llama31() {
  RopeScaling r;
  r.type = RopeType::kLlama3;
  r.factor = 8;
  r.low_freq_factor = 1;
  r.high_freq_factor = 4;
  r.original_max_positions = 8192;
  return r;
}

TEST(RopeTest, Llama3TableByHand) {
  // head_dim 8, theta 5e5: plain frequencies 5e5^(-i/4) = 1, 0.0376060, 0.00141421,
  // 5.31830e-5, wavelengths 2 pi / f = 6.28, 167.1, 4442.9, 118142. Against the bands of
  // 8192 / 4 = 2048 and 8192 / 1 = 8192: the first two are kept, the last divided by 8,
  // the third blended with smooth = (8192 / 4442.88 - 1) / 3 = 0.281276:
  // f * ((1 - 0.281276) / 8 + 0.281276) = 0.00141421 * 0.371185 = 5.24935e-4 (to 5 digits).
  const std::vector<double> f = rope_inverse_frequencies(llama31(), 5e5, 8, 0);
  ASSERT_EQ(f.size(), 4u);
  EXPECT_DOUBLE_EQ(f[0], 1.0);
  EXPECT_NEAR(f[1], 0.0376060309, 1e-10);
  EXPECT_NEAR(f[2], 5.248461610e-4, 1e-12);
  EXPECT_NEAR(f[3], 5.318295897e-5 / 8, 1e-14);
}

TEST(RopeTest, Llama3KeepsHighAndSlowsLowFrequencies) {
  // Llama 3.1 8B's head: 128 dims, theta 5e5.
  const std::vector<double> plain = rope_inverse_frequencies({}, 5e5, 128, 0);
  const std::vector<double> scaled = rope_inverse_frequencies(llama31(), 5e5, 128, 0);
  for (size_t i = 0; i < plain.size(); ++i) {
    const double wavelength = 2 * std::numbers::pi / plain[i];
    if (wavelength < 2048) {
      EXPECT_EQ(scaled[i], plain[i]) << i;
    }
    if (wavelength > 8192) {
      EXPECT_DOUBLE_EQ(scaled[i], plain[i] / 8) << i;
    }
    EXPECT_LE(scaled[i], plain[i]);
    EXPECT_GE(scaled[i], plain[i] / 8 * (1 - 1e-15));
    if (i) {
      EXPECT_LT(scaled[i], scaled[i - 1]) << "monotonic at " << i;
    }
  }
}

TEST(RopeTest, LinearDividesEveryFrequency) {
  RopeScaling r;
  r.type = RopeType::kLinear;
  r.factor = 4;
  const std::vector<double> plain = rope_inverse_frequencies({}, 1e4, 64, 0);
  const std::vector<double> scaled = rope_inverse_frequencies(r, 1e4, 64, 0);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_DOUBLE_EQ(scaled[i], plain[i] / 4);
}

TEST(RopeTest, DynamicGrowsTheBaseOnlyPastTheContext) {
  RopeScaling r;
  r.type = RopeType::kDynamic;
  r.factor = 2;
  r.max_positions = 16;
  EXPECT_EQ(dynamic_rope_base(r, 1e4, 8, 16), 1e4);
  EXPECT_EQ(dynamic_rope_base(r, 1e4, 8, 1), 1e4);
  // 32 positions: 1e4 * (2 * 32 / 16 - 1)^(8 / 6) = 1e4 * 3^(4/3).
  EXPECT_NEAR(dynamic_rope_base(r, 1e4, 8, 32), 1e4 * std::pow(3.0, 4.0 / 3.0), 1e-8);
  // Per document: seq_len is its largest position + 1.
  const std::vector<int32_t> positions = {0, 1,  2,  0,  1,  2,  3,  4,  5,  6,  7, 8,
                                          9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19};
  const std::vector<int32_t> offsets = {0, 3, 23};
  const std::vector<double> bases = dynamic_rope_bases(r, 1e4, 8, positions, offsets);
  ASSERT_EQ(bases.size(), positions.size());
  EXPECT_EQ(bases[0], 1e4);
  EXPECT_EQ(bases[2], 1e4);
  EXPECT_EQ(bases[3], dynamic_rope_base(r, 1e4, 8, 20));
  EXPECT_EQ(bases[22], bases[3]);
  EXPECT_TRUE(dynamic_rope_bases({}, 1e4, 8, positions, offsets).empty());
}

TEST(RopeTest, YarnInterpolatesLowFrequenciesAndScalesTables) {
  RopeScaling r;
  r.type = RopeType::kYarn;
  r.factor = 4;
  r.original_max_positions = 4096;
  r.attention_factor = 0.1 * std::log(4.0) + 1;
  const std::vector<double> plain = rope_inverse_frequencies({}, 1e4, 64, 0);
  const std::vector<double> scaled = rope_inverse_frequencies(r, 1e4, 64, 0);
  // Dimensions turning more than 32 times over 4096 positions are kept; fewer than once,
  // divided by the factor.
  for (size_t i = 0; i < plain.size(); ++i) {
    const double turns = 4096 * plain[i] / (2 * std::numbers::pi);
    if (turns > 40) {
      EXPECT_DOUBLE_EQ(scaled[i], plain[i]) << i;
    }
    if (turns < 0.8) {
      EXPECT_DOUBLE_EQ(scaled[i], plain[i] / 4) << i;
    }
  }
  const std::vector<int32_t> positions = {0, 5};
  const std::vector<int32_t> offsets = {0, 2};
  std::vector<float> cos(64), sin(64);
  rope_tables(r, 1e4, 64, positions, offsets, cos.data(), sin.data());
  EXPECT_FLOAT_EQ(cos[0], float(r.attention_factor));
  EXPECT_FLOAT_EQ(sin[0], 0.0f);
  EXPECT_FLOAT_EQ(cos[32], float(std::cos(5.0) * r.attention_factor));
}

TEST(RopeTest, DefaultTablesAreThePlainAngles) {
  const std::vector<int32_t> positions = {0, 1, 7, 0, 3};
  const std::vector<int32_t> offsets = {0, 3, 5};
  std::vector<float> cos(5 * 8), sin(5 * 8);
  rope_tables({}, 1e4, 16, positions, offsets, cos.data(), sin.data());
  for (size_t t = 0; t < positions.size(); ++t)
    for (size_t i = 0; i < 8; ++i) {
      const double angle = positions[t] * std::pow(1e4, -double(2 * i) / 16);
      EXPECT_EQ(cos[t * 8 + i], float(std::cos(angle)));
      EXPECT_EQ(sin[t * 8 + i], float(std::sin(angle)));
    }
}

// Properties of every valid rule over random parameters: frequencies finite, between the
// plain ones divided by the factor and the plain ones, falling with the dimension; dynamic
// bases growing with the length; tables bounded by the attention factor.
TEST(RopeTest, RandomRulesKeepTheirInvariants) {
  uint64_t state = 3;
  const auto uniform = [&state](double lo, double hi) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * double(state >> 11) / double(1ull << 53);
  };
  const RopeType types[] = {RopeType::kLinear, RopeType::kDynamic, RopeType::kYarn,
                            RopeType::kLlama3};
  for (int iteration = 0; iteration < 2000; ++iteration) {
    RopeScaling r;
    r.type = types[iteration % 4];
    r.factor = uniform(1, 64);
    r.original_max_positions = std::floor(uniform(16, 1 << 17));
    r.max_positions = std::floor(uniform(16, 1 << 17));
    r.low_freq_factor = uniform(0.5, 4);
    r.high_freq_factor = r.low_freq_factor + uniform(0.1, 8);
    r.beta_slow = uniform(0.5, 4);
    r.beta_fast = r.beta_slow + uniform(0, 64);
    r.truncate = iteration % 3 != 0;
    r.attention_factor = r.type == RopeType::kYarn ? 0.1 * std::log(r.factor) + 1 : 1.0;
    ASSERT_EQ(validate_rope(r), "");
    const double theta = std::exp(uniform(std::log(100.0), std::log(1e8)));
    const uint32_t head_dim = 4 * uint32_t(uniform(1, 65));
    const int64_t seq_len = int64_t(uniform(1, 1 << 18));
    const std::vector<double> plain = rope_inverse_frequencies({}, theta, head_dim, 0);
    const std::vector<double> f = rope_inverse_frequencies(r, theta, head_dim, seq_len);
    ASSERT_EQ(f.size(), head_dim / 2u);
    for (size_t i = 0; i < f.size(); ++i) {
      ASSERT_TRUE(std::isfinite(f[i]) && f[i] > 0) << i;
      if (r.type != RopeType::kDynamic) {
        EXPECT_LE(f[i], plain[i] * (1 + 1e-12)) << rope_type_name(r.type) << " " << i;
        EXPECT_GE(f[i], plain[i] / r.factor * (1 - 1e-12)) << rope_type_name(r.type) << " " << i;
      }
      if (i) {
        EXPECT_LE(f[i], f[i - 1] * (1 + 1e-12)) << rope_type_name(r.type) << " " << i;
      }
    }
    if (r.type == RopeType::kDynamic) {
      const double base = dynamic_rope_base(r, theta, head_dim, seq_len);
      EXPECT_GE(base, theta);
      EXPECT_LE(base, dynamic_rope_base(r, theta, head_dim, seq_len + 1000));
    }
    const std::vector<int32_t> positions = {0, int32_t(seq_len % 100000), 7};
    const std::vector<int32_t> offsets = {0, 2, 3};
    std::vector<float> cos(3 * head_dim / 2), sin(3 * head_dim / 2);
    rope_tables(r, theta, head_dim, positions, offsets, cos.data(), sin.data());
    for (size_t i = 0; i < cos.size(); ++i) {
      const double bound = r.attention_factor * (1 + 1e-6);
      ASSERT_LE(std::hypot(double(cos[i]), double(sin[i])), bound) << i;
    }
  }
}

TEST(RopeTest, ValidationNamesTheProblem) {
  RopeScaling r = llama31();
  EXPECT_EQ(validate_rope(r), "");
  r.high_freq_factor = 1;
  EXPECT_NE(validate_rope(r).find("high above low"), std::string::npos);
  r = llama31();
  r.factor = 0.5;
  EXPECT_NE(validate_rope(r).find("factor"), std::string::npos);
  RopeScaling d;
  d.type = RopeType::kDynamic;
  d.factor = 2;
  EXPECT_NE(validate_rope(d).find("max_position_embeddings"), std::string::npos);
}

#if HSRING_CONTRACTS_ACTIVE
TEST(RopeContract, OffsetsThatDoNotPartitionThePositionsStopTheCaller) {
  const std::vector<int32_t> positions = {0, 1, 2};
  const std::vector<int32_t> offsets = {0, 2};  // three positions, two of them covered
  std::vector<float> cos(3 * 4), sin(3 * 4);
  EXPECT_DEATH(rope_tables(RopeScaling{}, 1e4, 8, positions, offsets, cos.data(), sin.data()),
               "contract violated: is_doc_partition");
}
#endif

}  // namespace
}  // namespace hsring
