// The DFlash block attention op: finite-difference checks of its backward in double, and
// its mask (a block sees its context range and its own rows, nothing else).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/error.h"
#include "grad_check.h"
#include "tests/common/thrown_error.h"
#include "train/block_attention.h"

namespace hsring::train {
namespace {

using testing::check_gradient;
using testing::project;
using testing::random_values;
using testing::sample_indices;

struct Inputs {
  BlockAttentionShape shape;
  std::vector<ContextRange> context;
  std::vector<double> q, ctx_k, ctx_v, block_k, block_v;

  Inputs(BlockAttentionShape s, std::vector<ContextRange> c, uint64_t seed)
      : shape(s), context(std::move(c)) {
    const size_t qd = s.heads * s.head_dim, kvd = s.kv_heads * s.head_dim;
    q = random_values(s.rows() * qd, seed);
    ctx_k = random_values(s.context_rows * kvd, seed + 1);
    ctx_v = random_values(s.context_rows * kvd, seed + 2);
    block_k = random_values(s.rows() * kvd, seed + 3);
    block_v = random_values(s.rows() * kvd, seed + 4);
  }

  std::vector<double> forward(std::vector<double>* lse = nullptr) const {
    std::vector<double> out(q.size()), l(shape.rows() * shape.heads);
    block_attention_forward(q.data(), ctx_k.data(), ctx_v.data(), block_k.data(), block_v.data(),
                            shape, context, out.data(), l.data(), 2);
    if (lse) *lse = l;
    return out;
  }
};

std::vector<size_t> all(size_t n) { return sample_indices(n, n, 0); }

// Shapes: GQA with a head dim that leaves a tail after the 4-wide dot, an empty context,
// overlapping ranges and a context row no block sees; then MHA.
class BlockAttentionGradientTest : public ::testing::TestWithParam<int> {};

TEST_P(BlockAttentionGradientTest, EveryInput) {
  const bool gqa = GetParam() == 0;
  const BlockAttentionShape shape =
      gqa ? BlockAttentionShape{3, 3, 8, 4, 2, 6} : BlockAttentionShape{2, 4, 5, 2, 2, 8};
  std::vector<ContextRange> context = gqa ? std::vector<ContextRange>{{0, 3}, {1, 6}, {6, 6}}
                                          : std::vector<ContextRange>{{0, 5}, {2, 4}};
  Inputs in(shape, context, 10 + uint64_t(GetParam()));
  const std::vector<double> c = random_values(in.q.size(), 99);
  std::vector<double> lse;
  const std::vector<double> out = in.forward(&lse);
  std::vector<double> dq(in.q.size()), dck(in.ctx_k.size(), 7.0), dcv(in.ctx_v.size(), 7.0),
      dbk(in.block_k.size()), dbv(in.block_v.size());
  block_attention_backward(in.q.data(), in.ctx_k.data(), in.ctx_v.data(), in.block_k.data(),
                           in.block_v.data(), out.data(), c.data(), lse.data(), shape, in.context,
                           dq.data(), dck.data(), dcv.data(), dbk.data(), dbv.data(), 2);
  const auto loss = [&] { return project(in.forward(), c); };
  const struct {
    std::vector<double>* values;
    const std::vector<double>* grad;
    const char* name;
  } checks[] = {{&in.q, &dq, "dq"},
                {&in.ctx_k, &dck, "d ctx k"},
                {&in.ctx_v, &dcv, "d ctx v"},
                {&in.block_k, &dbk, "d block k"},
                {&in.block_v, &dbv, "d block v"}};
  for (const auto& check : checks) {
    const auto g = check_gradient(*check.values, *check.grad, loss, all(check.values->size()));
    EXPECT_LT(g.max_error, 1e-6) << g.describe(check.name);
  }
  if (gqa) {
    // Context row 7 is in no range: its gradients are written, and zero.
    const size_t kvd = shape.kv_heads * shape.head_dim;
    for (size_t i = 7 * kvd; i < 8 * kvd; ++i) {
      EXPECT_EQ(dck[i], 0.0);
      EXPECT_EQ(dcv[i], 0.0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, BlockAttentionGradientTest, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == 0 ? "GroupedQuery" : "MultiHead";
                         });

TEST(BlockAttentionTest, BlockSeesItsContextAndItsOwnRowsOnly) {
  const BlockAttentionShape shape{3, 3, 8, 4, 2, 4};
  const std::vector<ContextRange> context{{0, 3}, {1, 6}, {6, 6}};
  const Inputs base(shape, context, 20);
  const std::vector<double> reference = base.forward();
  const size_t qd = shape.heads * shape.head_dim, kvd = shape.kv_heads * shape.head_dim;
  const size_t bs = shape.block_size;
  // Which blocks moved when one input row moved, bit for bit.
  const auto moved = [&](const std::vector<double>& out) {
    std::vector<bool> blocks(shape.blocks, false);
    for (size_t i = 0; i < out.size(); ++i)
      if (out[i] != reference[i]) blocks[i / (bs * qd)] = true;
    return blocks;
  };
  for (size_t j = 0; j < shape.context_rows; ++j)
    for (int which = 0; which < 2; ++which) {
      Inputs in = base;
      std::vector<double>& rows = which == 0 ? in.ctx_k : in.ctx_v;
      for (size_t i = 0; i < kvd; ++i) rows[j * kvd + i] += 0.25;
      const std::vector<bool> m = moved(in.forward());
      for (size_t b = 0; b < shape.blocks; ++b)
        EXPECT_EQ(m[b], context[b].begin <= j && j < context[b].end)
            << "context row " << j << (which == 0 ? " k" : " v") << ", block " << b;
    }
  for (size_t r = 0; r < shape.rows(); ++r) {
    Inputs in = base;
    for (size_t i = 0; i < kvd; ++i) in.block_v[r * kvd + i] += 0.25;
    const std::vector<bool> m = moved(in.forward());
    for (size_t b = 0; b < shape.blocks; ++b)
      EXPECT_EQ(m[b], b == r / bs) << "block row " << r << ", block " << b;
  }
}

TEST(BlockAttentionTest, ThreadCountDoesNotChangeBits) {
  const BlockAttentionShape shape{12, 8, 300, 4, 2, 16};
  std::vector<ContextRange> context;
  for (size_t b = 0; b < shape.blocks; ++b) context.push_back({b * 10, b * 10 + 150});
  Inputs in(shape, context, 30);
  const std::vector<double> c = random_values(in.q.size(), 31);
  const auto run = [&](uint32_t threads) {
    std::vector<double> out(in.q.size()), lse(shape.rows() * shape.heads);
    block_attention_forward(in.q.data(), in.ctx_k.data(), in.ctx_v.data(), in.block_k.data(),
                            in.block_v.data(), shape, context, out.data(), lse.data(), threads);
    std::vector<double> dq(in.q.size()), dck(in.ctx_k.size()), dcv(in.ctx_v.size()),
        dbk(in.block_k.size()), dbv(in.block_v.size());
    block_attention_backward(in.q.data(), in.ctx_k.data(), in.ctx_v.data(), in.block_k.data(),
                             in.block_v.data(), out.data(), c.data(), lse.data(), shape, context,
                             dq.data(), dck.data(), dcv.data(), dbk.data(), dbv.data(), threads);
    std::vector<double> all = out;
    for (const auto* v : {&lse, &dq, &dck, &dcv, &dbk, &dbv})
      all.insert(all.end(), v->begin(), v->end());
    return all;
  };
  const std::vector<double> one = run(1);
  EXPECT_EQ(run(2), one);
  EXPECT_EQ(run(3), one);
}

TEST(BlockAttentionTest, RejectsBadRanges) {
  const BlockAttentionShape shape{2, 2, 4, 2, 1, 4};
  const Inputs in(shape, {{0, 2}, {1, 4}}, 40);
  std::vector<double> out(in.q.size()), lse(shape.rows() * shape.heads);
  const auto forward = [&](std::vector<ContextRange> context) {
    block_attention_forward(in.q.data(), in.ctx_k.data(), in.ctx_v.data(), in.block_k.data(),
                            in.block_v.data(), shape, context, out.data(), lse.data(), 1);
  };
  const auto code = [&](std::vector<ContextRange> context) {
    return hsring::testing::thrown_code([&] { forward(context); });
  };
  EXPECT_NO_THROW(forward({{0, 2}, {1, 4}}));
  EXPECT_EQ(code({{0, 2}, {1, 5}}), Errc::kModel);
  EXPECT_EQ(code({{2, 1}, {1, 4}}), Errc::kModel);
  EXPECT_EQ(code({{0, 2}}), Errc::kModel);
}

}  // namespace
}  // namespace hsring::train
