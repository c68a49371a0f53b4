#include "train/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

#include "common/error.h"

namespace hsring::train {
namespace {

// Two tensors: "w" [1, 2] (decayed) at 0, "norm.weight" [1] (not decayed) at 2.
ParamLayout scalar_layout() {
  ParamLayout layout;
  layout.tensors.push_back({"w", {1, 2}, 0, 2, true});
  layout.tensors.push_back({"norm.weight", {1}, 2, 1, false});
  layout.total = 3;
  return layout;
}

TEST(LrScheduleTest, WarmupPeakCosineFloor) {
  LrSchedule s;
  s.peak_lr = 1e-3;
  s.min_lr = 1e-4;
  s.warmup_steps = 10;
  s.total_steps = 110;
  EXPECT_DOUBLE_EQ(s.lr(0), 1e-4);  // (0 + 1) / 10 of the peak
  EXPECT_DOUBLE_EQ(s.lr(4), 5e-4);
  EXPECT_DOUBLE_EQ(s.lr(9), 1e-3);     // warmup ends at the peak
  EXPECT_DOUBLE_EQ(s.lr(10), 1e-3);    // the cosine starts at the peak
  EXPECT_DOUBLE_EQ(s.lr(60), 5.5e-4);  // halfway: the mean of peak and floor
  EXPECT_NEAR(s.lr(35), 1e-4 + 9e-4 * 0.5 * (1 + std::cos(std::numbers::pi / 4)), 1e-15);
  EXPECT_NEAR(s.lr(109), 1e-4 + 9e-4 * 0.5 * (1 - std::cos(std::numbers::pi / 100)), 1e-15);
  EXPECT_DOUBLE_EQ(s.lr(110), 1e-4);  // the floor from total_steps on
  EXPECT_DOUBLE_EQ(s.lr(100000), 1e-4);
  for (uint64_t step = 11; step < 110; ++step) EXPECT_LT(s.lr(step), s.lr(step - 1));

  LrSchedule none;  // no warmup
  none.peak_lr = 2e-3;
  none.min_lr = 0;
  none.total_steps = 4;
  EXPECT_DOUBLE_EQ(none.lr(0), 2e-3);
  EXPECT_DOUBLE_EQ(none.lr(2), 1e-3);
  EXPECT_DOUBLE_EQ(none.lr(4), 0);

  LrSchedule constant;  // total 0: no decay after warmup
  constant.peak_lr = 1e-3;
  constant.warmup_steps = 2;
  EXPECT_DOUBLE_EQ(constant.lr(0), 5e-4);
  EXPECT_DOUBLE_EQ(constant.lr(2), 1e-3);
  EXPECT_DOUBLE_EQ(constant.lr(1000000), 1e-3);
}

TEST(AdamWTest, HandComputedSteps) {
  AdamWOptions o;
  o.schedule.peak_lr = 0.1;
  o.schedule.min_lr = 0.1;
  o.schedule.total_steps = 100;
  o.beta1 = 0.9;
  o.beta2 = 0.99;
  o.eps = 1e-8;
  o.weight_decay = 0.5;
  o.max_grad_norm = 0;
  AdamW adam(o, scalar_layout());
  std::vector<float> p = {1.0f, -2.0f, 3.0f};

  // Step 1: m = 0.1 g, v = 0.01 g^2; bias-corrected m / sqrt(v) = g / |g| = sign(g).
  //   decayed: p (1 - 0.1 * 0.5) - 0.1 sign(g);  norm: p - 0.1 sign(g).
  const std::vector<float> g1 = {0.5f, -0.25f, 2.0f};
  UpdateStats s = adam.update(p, g1);
  EXPECT_EQ(s.step, 1u);
  EXPECT_DOUBLE_EQ(s.lr, 0.1);
  EXPECT_FALSE(s.clipped);
  EXPECT_NEAR(s.grad_norm, std::sqrt(0.25 + 0.0625 + 4.0), 1e-12);
  EXPECT_NEAR(p[0], 1.0 * 0.95 - 0.1, 1e-6);
  EXPECT_NEAR(p[1], -2.0 * 0.95 + 0.1, 1e-6);
  EXPECT_NEAR(p[2], 3.0 - 0.1, 1e-6);
  EXPECT_NEAR(adam.first_moment()[0], 0.05, 1e-8);
  EXPECT_NEAR(adam.second_moment()[2], 0.04, 1e-8);

  // Step 2 on element 0 with g = -1: m = 0.9 * 0.05 - 0.1 = -0.055, v = 0.99 * 0.0025 + 0.01
  // = 0.012475; mhat = -0.055 / 0.19, vhat = 0.012475 / 0.0199.
  const float p0 = p[0];
  const std::vector<float> g2 = {-1.0f, 0.0f, 0.0f};
  s = adam.update(p, g2);
  EXPECT_EQ(s.step, 2u);
  const double mhat = -0.055 / 0.19, vhat = 0.012475 / 0.0199;
  EXPECT_NEAR(p[0], p0 * 0.95 - 0.1 * mhat / (std::sqrt(vhat) + 1e-8), 1e-6);
}

TEST(AdamWTest, ClipsByGlobalNorm) {
  std::vector<float> g = {3.0f, 4.0f};
  EXPECT_DOUBLE_EQ(clip_global_norm(g, 1.0), 5.0);
  EXPECT_FLOAT_EQ(g[0], 0.6f);
  EXPECT_FLOAT_EQ(g[1], 0.8f);
  EXPECT_NEAR(clip_global_norm(g, 2.0), 1.0, 1e-7);  // under the limit: unchanged
  EXPECT_FLOAT_EQ(g[0], 0.6f);
  std::vector<float> big = {30.0f, 40.0f};
  clip_global_norm(big, 0.0);  // 0: never clip
  EXPECT_EQ(big[0], 30.0f);

  // Inside an update the clipped gradient is what the moments see: m = (1 - b1) g * 1/5.
  AdamWOptions o;
  o.max_grad_norm = 1.0;
  AdamW adam(o, scalar_layout());
  std::vector<float> p(3, 0.0f);
  const std::vector<float> grads = {3.0f, 0.0f, 4.0f};
  const UpdateStats s = adam.update(p, grads);
  EXPECT_TRUE(s.clipped);
  EXPECT_DOUBLE_EQ(s.grad_norm, 5.0);
  EXPECT_NEAR(adam.first_moment()[0], 0.1 * 0.6, 1e-8);
  EXPECT_NEAR(adam.first_moment()[2], 0.1 * 0.8, 1e-8);
  EXPECT_EQ(grads[0], 3.0f);  // the caller's gradient is only read
}

// The factors both optimizers apply (the CPU's here, the CUDA kernel's in
// train/cuda_flat_state.cc): the schedule's rate, weight decay only where a tensor decays,
// clipping only past max_grad_norm, and the bias corrections of step t = step + 1.
TEST(AdamWTest, StepFactorsFollowTheScheduleDecayAndClipping) {
  AdamWOptions o;
  o.schedule = {.peak_lr = 1e-3, .min_lr = 1e-4, .warmup_steps = 4, .total_steps = 100};
  o.beta1 = 0.8;
  o.beta2 = 0.9;
  o.eps = 1e-6;
  o.weight_decay = 0.1;
  o.max_grad_norm = 2.0;
  const AdamWStep decayed = adamw_step(o, 2, 8.0, true);
  EXPECT_DOUBLE_EQ(decayed.lr, o.schedule.lr(2));
  EXPECT_DOUBLE_EQ(decayed.lr, 1e-3 * 3 / 4);  // warmup: peak * (step + 1) / warmup
  EXPECT_DOUBLE_EQ(decayed.keep, 1.0 - decayed.lr * 0.1);
  EXPECT_DOUBLE_EQ(decayed.clip, 2.0 / 8.0);
  EXPECT_DOUBLE_EQ(decayed.correction1, 1.0 - 0.8 * 0.8 * 0.8);
  EXPECT_DOUBLE_EQ(decayed.correction2, 1.0 - 0.9 * 0.9 * 0.9);
  EXPECT_EQ(decayed.beta1, 0.8);
  EXPECT_EQ(decayed.beta2, 0.9);
  EXPECT_EQ(decayed.eps, 1e-6);

  const AdamWStep plain = adamw_step(o, 2, 1.5, false);
  EXPECT_EQ(plain.keep, 1.0) << "no decay on a tensor without weight_decay";
  EXPECT_EQ(plain.clip, 1.0) << "a norm under max_grad_norm is not clipped";
  o.max_grad_norm = 0;
  EXPECT_EQ(adamw_step(o, 2, 1e9, false).clip, 1.0) << "max_grad_norm 0: never clip";
  EXPECT_DOUBLE_EQ(adamw_step(o, 100, 1.0, false).lr, 1e-4) << "the schedule's floor";
}

TEST(AdamWTest, SkipsNonFiniteGradients) {
  AdamW adam(AdamWOptions{}, scalar_layout());
  std::vector<float> p = {1, 2, 3};
  const std::vector<float> g = {0.1f, std::numeric_limits<float>::quiet_NaN(), 0.2f};
  const UpdateStats s = adam.update(p, g);
  EXPECT_TRUE(s.skipped);
  EXPECT_EQ(s.step, 0u);
  EXPECT_EQ(adam.step(), 0u);
  EXPECT_EQ(p, (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(adam.first_moment()[0], 0.0f);
}

TEST(AdamWTest, ResumeFromStateIsExact) {
  AdamWOptions o;
  o.schedule = {1e-2, 1e-3, 3, 20};
  const ParamLayout layout = scalar_layout();
  AdamW a(o, layout);
  std::vector<float> pa = {0.5f, -0.5f, 1.0f};
  const auto grad = [](int step) {
    return std::vector<float>{std::sin(float(step)), std::cos(float(step)), 0.1f * float(step)};
  };
  for (int i = 0; i < 5; ++i) a.update(pa, grad(i));
  // A second optimizer restored from a's flat state continues bit for bit.
  AdamW b(o, layout);
  std::copy(a.first_moment().begin(), a.first_moment().end(), b.first_moment().begin());
  std::copy(a.second_moment().begin(), a.second_moment().end(), b.second_moment().begin());
  b.set_step(a.step());
  std::vector<float> pb = pa;
  for (int i = 5; i < 9; ++i) {
    a.update(pa, grad(i));
    b.update(pb, grad(i));
  }
  EXPECT_EQ(pa, pb);
  EXPECT_EQ(a.step(), 9u);
  EXPECT_EQ(b.step(), 9u);
}

TEST(AdamWTest, RejectsBadOptions) {
  const auto rejected = [](auto&& edit) {
    AdamWOptions o;
    edit(o);
    return !validate_adamw_options(o).empty();
  };
  EXPECT_FALSE(rejected([](AdamWOptions&) {}));
  EXPECT_TRUE(rejected([](AdamWOptions& o) { o.beta1 = 1.0; }));
  EXPECT_TRUE(rejected([](AdamWOptions& o) { o.beta2 = -0.1; }));
  EXPECT_TRUE(rejected([](AdamWOptions& o) { o.eps = 0; }));
  EXPECT_TRUE(rejected([](AdamWOptions& o) { o.weight_decay = -1; }));
  EXPECT_TRUE(rejected([](AdamWOptions& o) { o.schedule.peak_lr = -1; }));
  EXPECT_TRUE(rejected([](AdamWOptions& o) { o.schedule.min_lr = 1; }));
  EXPECT_TRUE(rejected([](AdamWOptions& o) {
    o.schedule.warmup_steps = 5;
    o.schedule.total_steps = 3;
  }));
  AdamWOptions bad;
  bad.beta1 = 2;
  try {
    AdamW adam(bad, scalar_layout());
    FAIL() << "accepted beta1 = 2";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kModelBadConfig);
    EXPECT_NE(std::string(e.what()).find("beta1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hsring::train
