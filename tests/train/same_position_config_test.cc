#include "train/same_position_config.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/error.h"
#include "train/dflash_config.h"

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

// Both drafters check their decoder layers with one definition (train/drafter_layer_checks.h):
// the same fault gives the same words, the bad value printed as given.
TEST(SamePositionConfigTest, BothDrafterConfigsCheckTheirLayersAlike) {
  const ModelConfig tiny = named_model_config("tiny");
  const SamePositionConfig same = default_same_position_config(tiny, 2);
  const DflashConfig dflash = default_dflash_config(tiny, 2, 1);
  ASSERT_EQ(validate_dflash_config(dflash), "");
  const auto both = [&](auto&& edit) {
    SamePositionConfig a = same;
    DflashConfig b = dflash;
    edit(a);
    edit(b);
    const std::string why = validate_same_position_config(a);
    EXPECT_EQ(why, validate_dflash_config(b));
    return why;
  };
  EXPECT_EQ(both([](auto& c) { c.num_kv_heads = 3; }),
            "num_heads (4) must be a multiple of num_kv_heads (3)");
  EXPECT_EQ(both([](auto& c) { c.head_dim = 31; }), "head_dim (31) must be even for RoPE");
  EXPECT_EQ(both([](auto& c) { c.rope_theta = std::nan(""); }),
            "rope_theta must be a finite number above 1, not nan");
  EXPECT_EQ(both([](auto& c) { c.rope_theta = 0.5; }),
            "rope_theta must be a finite number above 1, not 0.5");
  EXPECT_EQ(both([](auto& c) { c.rms_norm_eps = -1e-06; }),
            "rms_norm_eps must be a finite positive number, not -1e-06");
  EXPECT_EQ(both([](auto& c) { c.vocab_size = 1u << 31; }), "vocab_size must fit int32 labels");
}

}  // namespace
}  // namespace hsring::train
