// Finite-difference checks of every op's backward, in double: the loss is a fixed
// random projection sum_i c_i y_i of the op's output, so its gradient is the backward of
// dy = c. A wrong sign, a missing term or a swapped index fails by orders of magnitude
// (errors here are ~1e-9; the bound is 1e-6).
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <vector>

#include "common/ignore_label.h"
#include "grad_check.h"
#include "ops/attention.h"
#include "ops/bias.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"

namespace hsring::ops {
namespace {

using train::testing::check_gradient;
using train::testing::project;
using train::testing::random_values;
using train::testing::sample_indices;
constexpr Sums kSums = Sums::kDouble;

constexpr double kTolerance = 1e-6;

std::vector<size_t> all(size_t n) { return sample_indices(n, n, 0); }

TEST(OpsGradientTest, LinearGradients) {
  // in = 19: two 8-lane blocks and a tail; out = 6 not a multiple of the 4-row group.
  const size_t rows = 5, in = 19, out = 6;
  std::vector<double> x = random_values(rows * in, 1), w = random_values(out * in, 2);
  const std::vector<double> c = random_values(rows * out, 3);
  const auto loss = [&] {
    std::vector<double> y(rows * out);
    ops::linear_forward(x.data(), rows, in, w.data(), out, y.data(), kSums, 1);
    return project(y, c);
  };
  std::vector<double> dx(rows * in), dw(out * in, 0.0);
  ops::linear_backward_input(c.data(), rows, out, w.data(), in, dx.data(), false, 1);
  ops::linear_backward_weight(c.data(), rows, out, x.data(), in, dw.data(), 1);
  const auto gx = check_gradient(x, dx, loss, all(x.size()));
  EXPECT_LT(gx.max_error, kTolerance) << gx.describe("dx");
  const auto gw = check_gradient(w, dw, loss, all(w.size()));
  EXPECT_LT(gw.max_error, kTolerance) << gw.describe("dw");

  // accumulate adds to dx; the weight gradient always adds.
  std::vector<double> dx2(rows * in, 1.0), dw2(out * in, 2.0);
  ops::linear_backward_input(c.data(), rows, out, w.data(), in, dx2.data(), true, 1);
  ops::linear_backward_weight(c.data(), rows, out, x.data(), in, dw2.data(), 1);
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_DOUBLE_EQ(dx2[i], dx[i] + 1.0);
  for (size_t i = 0; i < dw.size(); ++i) EXPECT_DOUBLE_EQ(dw2[i], dw[i] + 2.0);
}

TEST(OpsGradientTest, LinearHandValues) {
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};            // [2, 3]
  const std::vector<float> w = {1, 0, -1, 0.5f, 0.5f, 0.5f};  // [2, 3]
  std::vector<float> y(4);
  ops::linear_forward(x.data(), 2, 3, w.data(), 2, y.data(), kSums, 1);
  EXPECT_EQ(y, (std::vector<float>{-2, 3, -2, 7.5f}));
}

TEST(OpsGradientTest, FcProjectionThenNormGradients) {
  // The drafter's input: RMSNorm(features fc^T), features [rows, K*H] wider than D.
  const size_t rows = 4, fd = 24, d = 8;
  const double eps = 1e-6;
  std::vector<double> features = random_values(rows * fd, 10);
  std::vector<double> fc = random_values(d * fd, 11, -0.3, 0.3);
  std::vector<double> norm = random_values(d, 12, 0.5, 1.5);
  const std::vector<double> c = random_values(rows * d, 13);
  std::vector<double> x(rows * d), y(rows * d);
  const auto loss = [&] {
    ops::linear_forward(features.data(), rows, fd, fc.data(), d, x.data(), kSums, 1);
    ops::rms_norm_forward(x.data(), norm.data(), rows, d, eps, y.data(), kSums);
    return project(y, c);
  };
  loss();
  std::vector<double> dx(rows * d), dfc(d * fd, 0.0), dnorm(d, 0.0);
  ops::rms_norm_backward(x.data(), norm.data(), c.data(), rows, d, eps, dx.data(), false,
                         dnorm.data());
  ops::linear_backward_weight(dx.data(), rows, d, features.data(), fd, dfc.data(), 1);
  const auto g = check_gradient(fc, dfc, loss, all(fc.size()));
  EXPECT_LT(g.max_error, kTolerance) << g.describe("d fc.weight");
  const auto gn = check_gradient(norm, dnorm, loss, all(d));
  EXPECT_LT(gn.max_error, kTolerance) << gn.describe("d hidden_norm.weight");
}

TEST(OpsGradientTest, RmsNormGradients) {
  const size_t rows = 4, dim = 11;
  const double eps = 1e-5;
  std::vector<double> x = random_values(rows * dim, 20, -2, 2);
  std::vector<double> w = random_values(dim, 21, 0.5, 1.5);
  const std::vector<double> c = random_values(rows * dim, 22);
  const auto loss = [&] {
    std::vector<double> y(rows * dim);
    ops::rms_norm_forward(x.data(), w.data(), rows, dim, eps, y.data(), kSums);
    return project(y, c);
  };
  std::vector<double> dx(rows * dim), dw(dim, 0.0);
  ops::rms_norm_backward(x.data(), w.data(), c.data(), rows, dim, eps, dx.data(), false, dw.data());
  const auto gx = check_gradient(x, dx, loss, all(x.size()));
  EXPECT_LT(gx.max_error, kTolerance) << gx.describe("dx");
  const auto gw = check_gradient(w, dw, loss, all(dim));
  EXPECT_LT(gw.max_error, kTolerance) << gw.describe("dweight");
}

TEST(OpsGradientTest, RmsNormHandValues) {
  const std::vector<float> x = {1, 2, 3, 4};
  const std::vector<float> w = {1, 1, 2, 0.5f};
  std::vector<float> y(4);
  // mean(x^2) = 7.5; + eps 0.5 = 8: every x is divided by sqrt(8).
  ops::rms_norm_forward(x.data(), w.data(), 1, 4, 0.5, y.data(), kSums);
  EXPECT_NEAR(y[0], 0.35355339f, 1e-7);
  EXPECT_NEAR(y[2], 2.12132034f, 1e-6);
  EXPECT_NEAR(y[3], 0.70710678f, 1e-7);
}

TEST(OpsGradientTest, RopeGradients) {
  const size_t rows = 3, heads = 2, hd = 6;
  const std::vector<int32_t> positions = {0, 5, 17};
  std::vector<double> cos(rows * hd / 2), sin(rows * hd / 2);
  rope_angles<double>(positions, hd, 10000.0, cos.data(), sin.data());
  std::vector<double> x = random_values(rows * heads * hd, 30);
  const std::vector<double> c = random_values(x.size(), 31);
  const auto loss = [&] {
    std::vector<double> y = x;
    ops::rope_forward(y.data(), {rows, heads, hd}, cos.data(), sin.data(), kSums);
    return project(y, c);
  };
  std::vector<double> dx = c;
  ops::rope_backward(dx.data(), {rows, heads, hd}, cos.data(), sin.data());
  const auto g = check_gradient(x, dx, loss, all(x.size()));
  EXPECT_LT(g.max_error, kTolerance) << g.describe("dx");
}

TEST(OpsGradientTest, RopeMatchesHandRotation) {
  // head_dim 4, theta 10000: frequencies 1 and 0.01; pairs (0, 2) and (1, 3).
  const std::vector<int32_t> positions = {1};
  std::vector<double> cos(2), sin(2);
  rope_angles<double>(positions, 4, 10000.0, cos.data(), sin.data());
  std::vector<double> x = {1, 2, 3, 4};
  ops::rope_forward(x.data(), {1, 1, 4}, cos.data(), sin.data(), kSums);
  EXPECT_NEAR(x[0], 1 * std::cos(1.0) - 3 * std::sin(1.0), 1e-15);
  EXPECT_NEAR(x[2], 3 * std::cos(1.0) + 1 * std::sin(1.0), 1e-15);
  EXPECT_NEAR(x[1], 2 * std::cos(0.01) - 4 * std::sin(0.01), 1e-15);
  // The backward is the inverse rotation: it undoes the forward.
  ops::rope_backward(x.data(), {1, 1, 4}, cos.data(), sin.data());
  EXPECT_NEAR(x[0], 1, 1e-15);
  EXPECT_NEAR(x[3], 4, 1e-15);
}

TEST(OpsGradientTest, SwigluGradients) {
  const size_t n = 24;
  std::vector<double> gate = random_values(n, 40, -6, 6), up = random_values(n, 41, -2, 2);
  const std::vector<double> c = random_values(n, 42);
  const auto loss = [&] {
    std::vector<double> y(n);
    ops::swiglu_forward(gate.data(), up.data(), n, y.data(), kSums);
    return project(y, c);
  };
  std::vector<double> dgate(n), dup(n);
  ops::swiglu_backward(gate.data(), up.data(), c.data(), n, dgate.data(), dup.data());
  const auto gg = check_gradient(gate, dgate, loss, all(n));
  EXPECT_LT(gg.max_error, kTolerance) << gg.describe("dgate");
  const auto gu = check_gradient(up, dup, loss, all(n));
  EXPECT_LT(gu.max_error, kTolerance) << gu.describe("dup");
}

TEST(OpsGradientTest, EmbeddingGradients) {
  const size_t rows = 7, dim = 5, vocab = 4;
  const std::vector<int32_t> tokens = {2, 0, 2, 3, 2, 0, 1};
  std::vector<double> table = random_values(vocab * dim, 50);
  const std::vector<double> base = random_values(rows * dim, 51);
  const std::vector<double> c = random_values(rows * dim, 52);
  const auto loss = [&] {
    std::vector<double> y = base;
    ops::embedding_forward(table.data(), tokens.data(), rows, dim, y.data(), true);
    return project(y, c);
  };
  std::vector<double> dtable(vocab * dim, 0.0);
  ops::embedding_backward(tokens.data(), c.data(), rows, dim, dtable.data());
  const auto g = check_gradient(table, dtable, loss, all(table.size()));
  EXPECT_LT(g.max_error, kTolerance) << g.describe("dtable");
}

TEST(OpsGradientTest, BiasGradients) {
  const size_t rows = 5, dim = 7;
  std::vector<double> bias = random_values(dim, 55);
  const std::vector<double> base = random_values(rows * dim, 56);
  const std::vector<double> c = random_values(rows * dim, 57);
  const auto loss = [&] {
    std::vector<double> y = base;
    ops::bias_forward(y.data(), rows, dim, bias.data());
    return project(y, c);
  };
  std::vector<double> dbias(dim, 0.5);  // the gradient adds to what is there
  ops::bias_backward(c.data(), rows, dim, dbias.data());
  for (double& d : dbias) d -= 0.5;
  const auto g = check_gradient(bias, dbias, loss, all(dim));
  EXPECT_LT(g.max_error, kTolerance) << g.describe("dbias");
}

TEST(OpsGradientTest, PartialRopeGradientsLeaveTheRestAlone) {
  // rotary_dim 4 of head_dim 8 (partial RoPE): dims 4..7 of every head pass unchanged.
  const size_t rows = 3, heads = 2, hd = 8, rotary = 4;
  const std::vector<int32_t> positions = {0, 5, 17};
  std::vector<double> cos(rows * rotary / 2), sin(rows * rotary / 2);
  rope_angles<double>(positions, rotary, 10000.0, cos.data(), sin.data());
  std::vector<double> x = random_values(rows * heads * hd, 58);
  const std::vector<double> c = random_values(x.size(), 59);
  const RopeShape shape{rows, heads, hd, rotary};
  const auto loss = [&] {
    std::vector<double> y = x;
    ops::rope_forward(y.data(), shape, cos.data(), sin.data(), kSums);
    return project(y, c);
  };
  std::vector<double> y = x;
  ops::rope_forward(y.data(), shape, cos.data(), sin.data(), kSums);
  for (size_t r = 0; r < rows * heads; ++r)
    for (size_t i = rotary; i < hd; ++i) EXPECT_EQ(y[r * hd + i], x[r * hd + i]);
  std::vector<double> dx = c;
  ops::rope_backward(dx.data(), shape, cos.data(), sin.data());
  const auto g = check_gradient(x, dx, loss, all(x.size()));
  EXPECT_LT(g.max_error, kTolerance) << g.describe("dx");
}

TEST(OpsGradientTest, CrossEntropyGradientsIgnoreLabels) {
  const size_t rows = 6, vocab = 9;
  const std::vector<int32_t> labels = {3, kIgnoreLabel, 0, 8, -1, 3};
  std::vector<double> logits = random_values(rows * vocab, 60, -3, 3);
  const double scale = 1.0 / 4;  // four counted rows: the mean
  const auto loss = [&] {
    return cross_entropy<double>(logits.data(), labels.data(), rows, vocab, 0, nullptr, 1).loss *
           scale;
  };
  std::vector<double> d(rows * vocab);
  const CrossEntropySums sums =
      cross_entropy<double>(logits.data(), labels.data(), rows, vocab, scale, d.data(), 1);
  EXPECT_EQ(sums.counted, 4u);
  const auto g = check_gradient(logits, d, loss, all(logits.size()));
  EXPECT_LT(g.max_error, kTolerance) << g.describe("dlogits");
  for (size_t r : {size_t(1), size_t(4)})
    for (size_t i = 0; i < vocab; ++i) EXPECT_EQ(d[r * vocab + i], 0.0) << "ignored row " << r;
}

TEST(OpsGradientTest, CrossEntropyHandValues) {
  // Row 0: logits (0, ln 3): p = (1/4, 3/4), label 1 -> loss ln(4/3), argmax 1 agrees.
  // Row 1: the same logits, label 0 -> loss ln 4, no agreement. Row 2 ignored.
  const std::vector<float> logits = {0, float(std::log(3.0)), 0, float(std::log(3.0)), 5, 5};
  const std::vector<int32_t> labels = {1, 0, kIgnoreLabel};
  std::vector<float> d(6);
  const CrossEntropySums s =
      cross_entropy<float>(logits.data(), labels.data(), 3, 2, 0.5, d.data(), 1);
  EXPECT_EQ(s.counted, 2u);
  EXPECT_EQ(s.agreed, 1u);
  EXPECT_NEAR(s.loss, std::log(4.0 / 3.0) + std::log(4.0), 1e-6);
  EXPECT_NEAR(d[0], 0.5 * 0.25, 1e-7);
  EXPECT_NEAR(d[1], 0.5 * (0.75 - 1), 1e-7);
  EXPECT_NEAR(d[2], 0.5 * (0.25 - 1), 1e-7);
  EXPECT_EQ(d[4], 0.0f);
  // Ties go to the first index, as the target's greedy labels do.
  const std::vector<float> tie = {2, 2};
  const std::vector<int32_t> second = {1};
  EXPECT_EQ(cross_entropy<float>(tie.data(), second.data(), 1, 2, 1, nullptr, 1).agreed, 0u);
}

TEST(OpsGradientTest, LmHeadCrossEntropyGradients) {
  // logits = f W^T, mean cross-entropy over counted rows: d f and d W through both ops.
  const size_t rows = 5, d = 6, vocab = 7;
  const std::vector<int32_t> labels = {6, kIgnoreLabel, 0, 2, 2};
  std::vector<double> f = random_values(rows * d, 70, -2, 2), w = random_values(vocab * d, 71);
  const double scale = 1.0 / 4;
  std::vector<double> logits(rows * vocab);
  const auto loss = [&] {
    ops::linear_forward(f.data(), rows, d, w.data(), vocab, logits.data(), kSums, 1);
    return cross_entropy<double>(logits.data(), labels.data(), rows, vocab, 0, nullptr, 1).loss *
           scale;
  };
  loss();
  cross_entropy<double>(logits.data(), labels.data(), rows, vocab, scale, logits.data(), 1);
  std::vector<double> df(rows * d), dw(vocab * d, 0.0);
  ops::linear_backward_input(logits.data(), rows, vocab, w.data(), d, df.data(), false, 1);
  ops::linear_backward_weight(logits.data(), rows, vocab, f.data(), d, dw.data(), 1);
  const auto gf = check_gradient(f, df, loss, all(f.size()));
  EXPECT_LT(gf.max_error, kTolerance) << gf.describe("df");
  const auto gw = check_gradient(w, dw, loss, all(w.size()));
  EXPECT_LT(gw.max_error, kTolerance) << gw.describe("d lm_head");
}

struct AttentionCase {
  size_t heads, kv_heads, head_dim, window;
  std::vector<int32_t> doc_offsets;
};

// What ctest shows after a case's name.
void PrintTo(const AttentionCase& c, std::ostream* os) {
  *os << c.heads << "/" << c.kv_heads << " heads of " << c.head_dim << ", window " << c.window
      << ", " << c.doc_offsets.size() - 1 << " documents";
}

class AttentionGradientTest : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(AttentionGradientTest, Gradients) {
  const AttentionCase& p = GetParam();
  const size_t rows = size_t(p.doc_offsets.back());
  const AttentionShape shape{rows, p.heads, p.kv_heads, p.head_dim, p.window};
  const size_t qd = p.heads * p.head_dim, kvd = p.kv_heads * p.head_dim;
  std::vector<double> q = random_values(rows * qd, 80, -1.5, 1.5);
  std::vector<double> k = random_values(rows * kvd, 81, -1.5, 1.5);
  std::vector<double> v = random_values(rows * kvd, 82);
  const std::vector<double> c = random_values(rows * qd, 83);
  std::vector<double> out(rows * qd), lse(rows * p.heads);
  const auto loss = [&] {
    ops::attention_forward(q.data(), k.data(), v.data(), shape, p.doc_offsets, out.data(),
                           lse.data(), kSums, 1);
    return project(out, c);
  };
  loss();
  std::vector<double> dq(q.size()), dk(k.size()), dv(v.size());
  ops::attention_backward(q.data(), k.data(), v.data(), out.data(), c.data(), lse.data(), shape,
                          p.doc_offsets, dq.data(), dk.data(), dv.data(), 1);
  const auto gq = check_gradient(q, dq, loss, all(q.size()));
  EXPECT_LT(gq.max_error, kTolerance) << gq.describe("dq");
  const auto gk = check_gradient(k, dk, loss, all(k.size()));
  EXPECT_LT(gk.max_error, kTolerance) << gk.describe("dk");
  const auto gv = check_gradient(v, dv, loss, all(v.size()));
  EXPECT_LT(gv.max_error, kTolerance) << gv.describe("dv");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionGradientTest,
    ::testing::Values(
        // Two documents, a window shorter than both: boundary and window both cut.
        AttentionCase{4, 2, 4, 3, {0, 5, 12}},
        // A window wider than any document: plain causal attention within documents.
        AttentionCase{2, 2, 6, 100, {0, 1, 7, 9}},
        // Window 1: each token sees only itself (out = v, no score gradient).
        AttentionCase{4, 1, 4, 1, {0, 6}},
        // Head dim 10: an 8-lane block and a tail in every dot.
        AttentionCase{2, 1, 10, 4, {0, 3, 10}}),
    [](const ::testing::TestParamInfo<AttentionCase>& info) {
      const AttentionCase& p = info.param;
      return "h" + std::to_string(p.heads) + "kv" + std::to_string(p.kv_heads) + "d" +
             std::to_string(p.head_dim) + "w" + std::to_string(p.window) + "docs" +
             std::to_string(p.doc_offsets.size() - 1);
    });

TEST(OpsGradientTest, AttentionNeverLooksPastDocumentOrWindow) {
  // Perturb one key/value row j at a time: output row t may change only when j is in t's
  // document, j <= t and t - j < window; everywhere else it must keep every bit.
  const std::vector<int32_t> offsets = {0, 6, 7, 16};
  const size_t rows = 16, heads = 2, kv_heads = 1, hd = 4, window = 4;
  const AttentionShape shape{rows, heads, kv_heads, hd, window};
  const std::vector<float> q = train::testing::random_floats(rows * heads * hd, 90);
  const std::vector<float> k0 = train::testing::random_floats(rows * kv_heads * hd, 91);
  const std::vector<float> v0 = train::testing::random_floats(rows * kv_heads * hd, 92);
  std::vector<float> base(rows * heads * hd), out(base.size());
  std::vector<double> lse(rows * heads);
  ops::attention_forward(q.data(), k0.data(), v0.data(), shape, offsets, base.data(), lse.data(),
                         kSums, 1);
  const auto doc_of = [&](size_t t) {
    size_t d = 0;
    while (size_t(offsets[d + 1]) <= t) ++d;
    return d;
  };
  for (size_t j = 0; j < rows; ++j) {
    std::vector<float> k = k0, v = v0;
    for (size_t i = 0; i < hd; ++i) {
      k[j * hd + i] += 0.5f;
      v[j * hd + i] -= 0.75f;
    }
    ops::attention_forward(q.data(), k.data(), v.data(), shape, offsets, out.data(), lse.data(),
                           kSums, 1);
    for (size_t t = 0; t < rows; ++t) {
      const bool visible = doc_of(t) == doc_of(j) && j <= t && t - j < window;
      bool same = true;
      for (size_t i = 0; i < heads * hd; ++i)
        same &= out[t * heads * hd + i] == base[t * heads * hd + i];
      EXPECT_EQ(same, !visible) << "query " << t << ", perturbed key " << j;
    }
  }
}

TEST(OpsGradientTest, GradCheckCatchesWrongBackwards) {
  // The checks above would fail on the usual backward bugs: a flipped sign, a dropped term.
  const size_t rows = 3, dim = 6;
  std::vector<double> x = random_values(rows * dim, 120, -2, 2);
  const std::vector<double> w = random_values(dim, 121, 0.5, 1.5);
  const std::vector<double> c = random_values(rows * dim, 122);
  const auto loss = [&] {
    std::vector<double> y(rows * dim);
    ops::rms_norm_forward(x.data(), w.data(), rows, dim, 1e-6, y.data(), kSums);
    return project(y, c);
  };
  std::vector<double> dx(rows * dim), dw(dim, 0.0);
  ops::rms_norm_backward(x.data(), w.data(), c.data(), rows, dim, 1e-6, dx.data(), false,
                         dw.data());
  std::vector<double> flipped = dx;
  for (double& g : flipped) g = -g;
  EXPECT_GT(check_gradient(x, flipped, loss, all(x.size())).max_error, 1.0);
  // Without the normalisation's own derivative: dx = w dy / rms(x).
  std::vector<double> partial(rows * dim);
  for (size_t r = 0; r < rows; ++r) {
    double squares = 0;
    for (size_t i = 0; i < dim; ++i) squares += x[r * dim + i] * x[r * dim + i];
    const double s = 1 / std::sqrt(squares / double(dim) + 1e-6);
    for (size_t i = 0; i < dim; ++i) partial[r * dim + i] = s * w[i] * c[r * dim + i];
  }
  EXPECT_GT(check_gradient(x, partial, loss, all(x.size())).max_error, 1e-2);
}

TEST(OpsGradientTest, FloatOpsMatchDouble) {
  // The float instantiation runs the same arithmetic with float storage: its results stay
  // within float rounding of the double ones.
  const size_t rows = 9, in = 21, out = 13;
  const std::vector<double> xd = random_values(rows * in, 100), wd = random_values(out * in, 101);
  const std::vector<float> xf(xd.begin(), xd.end()), wf(wd.begin(), wd.end());
  std::vector<double> yd(rows * out);
  std::vector<float> yf(rows * out);
  ops::linear_forward(xd.data(), rows, in, wd.data(), out, yd.data(), kSums, 1);
  ops::linear_forward(xf.data(), rows, in, wf.data(), out, yf.data(), kSums, 1);
  for (size_t i = 0; i < yd.size(); ++i) EXPECT_NEAR(yf[i], yd[i], 1e-6 * (1 + std::abs(yd[i])));
  std::vector<double> dwd(out * in, 0.0);
  std::vector<float> dwf(out * in, 0.0f);
  ops::linear_backward_weight(yd.data(), rows, out, xd.data(), in, dwd.data(), 1);
  ops::linear_backward_weight(yf.data(), rows, out, xf.data(), in, dwf.data(), 1);
  for (size_t i = 0; i < dwd.size(); ++i)
    EXPECT_NEAR(dwf[i], dwd[i], 1e-5 * (1 + std::abs(dwd[i])));
}

TEST(OpsGradientTest, ThreadCountDoesNotChangeBits) {
  // Large enough that every op splits its work over threads.
  const size_t rows = 96, d = 64, heads = 4, kv = 2, hd = 16;
  const std::vector<int32_t> offsets = {0, 40, 96};
  const AttentionShape shape{rows, heads, kv, hd, 24};
  const std::vector<float> x = train::testing::random_floats(rows * d, 110);
  const std::vector<float> w = train::testing::random_floats(heads * hd * d, 111);
  const std::vector<float> kvw = train::testing::random_floats(kv * hd * d, 112);
  const auto run = [&](uint32_t threads) {
    std::vector<float> q(rows * heads * hd), k(rows * kv * hd), attn(q.size());
    std::vector<double> lse(rows * heads);
    ops::linear_forward(x.data(), rows, d, w.data(), heads * hd, q.data(), kSums, threads);
    ops::linear_forward(x.data(), rows, d, kvw.data(), kv * hd, k.data(), kSums, threads);
    ops::attention_forward(q.data(), k.data(), k.data(), shape, offsets, attn.data(), lse.data(),
                           kSums, threads);
    std::vector<float> dq(q.size()), dk(k.size()), dv(k.size()), dx(rows * d), dw(w.size(), 0.0f);
    ops::attention_backward(q.data(), k.data(), k.data(), attn.data(), q.data(), lse.data(), shape,
                            offsets, dq.data(), dk.data(), dv.data(), threads);
    ops::linear_backward_input(dq.data(), rows, heads * hd, w.data(), d, dx.data(), false, threads);
    ops::linear_backward_weight(dq.data(), rows, heads * hd, x.data(), d, dw.data(), threads);
    std::vector<float> all = attn;
    for (const auto* part : {&dq, &dk, &dv, &dx, &dw})
      all.insert(all.end(), part->begin(), part->end());
    return all;
  };
  const std::vector<float> one = run(1);
  EXPECT_EQ(run(2), one);
  EXPECT_EQ(run(3), one);
}

}  // namespace
}  // namespace hsring::ops
