#include "train/same_position_config.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace hsring::train {
namespace {

TEST(SamePositionConfigTest, DefaultForTinyTarget) {
  const SamePositionConfig c = default_same_position_config(named_model_config("tiny"), 5);
  EXPECT_EQ(c.num_captured, 5u);
  EXPECT_EQ(c.target_hidden, 128u);
  EXPECT_EQ(c.feature_dim(), 640u);
  EXPECT_EQ(c.width, 128u);
  EXPECT_EQ(c.num_heads, 4u);
  EXPECT_EQ(c.num_kv_heads, 2u);
  EXPECT_EQ(c.head_dim, 32u);
  EXPECT_EQ(c.intermediate_size, 384u);
  EXPECT_EQ(c.vocab_size, 256u);
  EXPECT_EQ(c.window, 256u);
  EXPECT_FALSE(c.embed_tokens);
  EXPECT_EQ(describe(c), "K 5 x H 128 -> D 128, heads 4/2 x 32, inter 384, vocab 256, window 256");
}

TEST(SamePositionConfigTest, DefaultForQwen3_8b) {
  const SamePositionConfig c = default_same_position_config(named_model_config("qwen3-8b"), 5, 512);
  EXPECT_EQ(c.feature_dim(), 5u * 4096);
  EXPECT_EQ(c.width, 4096u);
  EXPECT_EQ(c.q_dim(), 32u * 128);
  EXPECT_EQ(c.kv_dim(), 8u * 128);
  EXPECT_EQ(c.vocab_size, 151936u);
  EXPECT_EQ(c.window, 512u);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
}

TEST(SamePositionConfigTest, ValidationNamesTheProblem) {
  const SamePositionConfig good = default_same_position_config(named_model_config("tiny"), 2);
  EXPECT_EQ(validate_same_position_config(good), "");
  const auto why = [&](auto&& edit) {
    SamePositionConfig c = good;
    edit(c);
    return validate_same_position_config(c);
  };
  EXPECT_EQ(why([](SamePositionConfig& c) { c.width = 0; }), "width (D) must be positive");
  EXPECT_EQ(why([](SamePositionConfig& c) { c.num_captured = 0; }),
            "num_captured (K) must be positive");
  EXPECT_EQ(why([](SamePositionConfig& c) { c.window = 0; }), "window must be positive");
  EXPECT_EQ(why([](SamePositionConfig& c) { c.num_kv_heads = 3; }),
            "num_heads (4) must be a multiple of num_kv_heads (3)");
  EXPECT_EQ(why([](SamePositionConfig& c) { c.head_dim = 7; }),
            "head_dim (7) must be even for RoPE");
  EXPECT_NE(why([](SamePositionConfig& c) { c.rms_norm_eps = 0; }), "");
  EXPECT_NE(why([](SamePositionConfig& c) { c.rope_theta = -1; }), "");
  SamePositionConfig bad = good;
  bad.num_heads = 0;
  try {
    check_same_position_config(bad);
    FAIL() << "accepted 0 heads";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kModelBadConfig);
    EXPECT_STREQ(e.what(), "drafter config: num_heads must be positive");
  }
  // A capture count of 0 fails in the derived config, naming it.
  EXPECT_THROW(default_same_position_config(named_model_config("tiny"), 0), Error);
}

}  // namespace
}  // namespace hsring::train
