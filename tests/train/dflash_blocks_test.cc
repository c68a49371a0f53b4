// The DFlash drafter's config, parameter layout, anchor sampling and acceptance statistic.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "dflash_batches.h"
#include "model/model_config.h"
#include "train/dflash_blocks.h"
#include "train/dflash_config.h"
#include "train/dflash_params.h"

namespace hsring::train {
namespace {

using testing::small_dflash_config;

TEST(DflashConfigTest, DefaultCopiesTheTarget) {
  const ModelConfig tiny = named_model_config("tiny");
  const DflashConfig c = default_dflash_config(tiny, 5, 2);
  EXPECT_EQ(c.num_captured, 5u);
  EXPECT_EQ(c.target_hidden, tiny.hidden_size);
  EXPECT_EQ(c.width(), tiny.hidden_size);
  EXPECT_EQ(c.num_layers, 2u);
  EXPECT_EQ(c.num_heads, tiny.num_heads);
  EXPECT_EQ(c.num_kv_heads, tiny.num_kv_heads);
  EXPECT_EQ(c.head_dim, tiny.head_dim);
  EXPECT_EQ(c.intermediate_size, tiny.intermediate_size);
  EXPECT_EQ(c.vocab_size, tiny.vocab_size);
  EXPECT_EQ(c.rope_theta, tiny.rope_theta);
  EXPECT_EQ(c.rms_norm_eps, tiny.rms_norm_eps);
  EXPECT_EQ(c.block_size, 16u);
  EXPECT_EQ(c.loss_gamma, 7.0);
  EXPECT_EQ(c.mask_token_id, int32_t(tiny.vocab_size) - 1);
  EXPECT_EQ(validate_dflash_config(c), "");
  EXPECT_EQ(describe(c),
            "dflash K 5 x H 128, 2 layers, heads 4/2 x 32, inter 384, vocab 256, block 16, mask "
            "255, gamma 7");
  EXPECT_THROW(default_dflash_config(tiny, 0, 1), Error);
  EXPECT_THROW(default_dflash_config(tiny, 5, 0), Error);
}

TEST(DflashConfigTest, ValidateNamesTheFirstProblem) {
  const DflashConfig good = small_dflash_config();
  EXPECT_EQ(validate_dflash_config(good), "");
  const auto why = [&](auto&& edit) {
    DflashConfig c = good;
    edit(c);
    return validate_dflash_config(c);
  };
  EXPECT_NE(why([](DflashConfig& c) { c.num_layers = 0; }).find("num_layers"), std::string::npos);
  EXPECT_NE(why([](DflashConfig& c) { c.num_kv_heads = 3; }).find("multiple"), std::string::npos);
  EXPECT_NE(why([](DflashConfig& c) { c.head_dim = 5; }).find("even"), std::string::npos);
  EXPECT_NE(why([](DflashConfig& c) { c.block_size = 1; }).find("block_size"), std::string::npos);
  EXPECT_NE(why([](DflashConfig& c) { c.mask_token_id = 13; }).find("mask_token_id"),
            std::string::npos);
  EXPECT_NE(why([](DflashConfig& c) { c.mask_token_id = -1; }).find("mask_token_id"),
            std::string::npos);
  EXPECT_NE(why([](DflashConfig& c) { c.loss_gamma = 0; }).find("loss_gamma"), std::string::npos);
  EXPECT_NE(why([](DflashConfig& c) { c.loss_gamma = NAN; }).find("loss_gamma"), std::string::npos);
  EXPECT_NE(why([](DflashConfig& c) { c.rope_theta = 1; }).find("rope_theta"), std::string::npos);
  EXPECT_THROW(check_dflash_config(DflashConfig{}), Error);
}

TEST(DflashLayoutTest, NamesShapesOffsets) {
  const DflashConfig c = small_dflash_config(2);
  const ParamLayout layout = dflash_param_layout(c);
  std::vector<std::string> names;
  for (const ParamInfo& t : layout.tensors) names.push_back(t.name);
  std::vector<std::string> want = {"fc.weight", "hidden_norm.weight"};
  for (const std::string p : {"layers.0.", "layers.1."})
    for (const char* n :
         {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
          "self_attn.v_proj.weight", "self_attn.o_proj.weight", "self_attn.q_norm.weight",
          "self_attn.k_norm.weight", "post_attention_layernorm.weight", "mlp.gate_proj.weight",
          "mlp.up_proj.weight", "mlp.down_proj.weight"})
      want.push_back(p + n);
  want.push_back("norm.weight");
  EXPECT_EQ(names, want);
  const auto shape = [&](const char* name) { return layout.at(name).shape; };
  using S = std::vector<int64_t>;
  EXPECT_EQ(shape("fc.weight"), (S{16, 32}));
  EXPECT_EQ(shape("hidden_norm.weight"), (S{16}));
  EXPECT_EQ(shape("layers.1.self_attn.q_proj.weight"), (S{16, 16}));
  EXPECT_EQ(shape("layers.1.self_attn.k_proj.weight"), (S{8, 16}));
  EXPECT_EQ(shape("layers.1.self_attn.v_proj.weight"), (S{8, 16}));
  EXPECT_EQ(shape("layers.1.self_attn.o_proj.weight"), (S{16, 16}));
  EXPECT_EQ(shape("layers.1.self_attn.q_norm.weight"), (S{4}));
  EXPECT_EQ(shape("layers.1.self_attn.k_norm.weight"), (S{4}));
  EXPECT_EQ(shape("layers.0.mlp.gate_proj.weight"), (S{24, 16}));
  EXPECT_EQ(shape("layers.0.mlp.down_proj.weight"), (S{16, 24}));
  size_t end = 0;
  for (const ParamInfo& t : layout.tensors) {
    EXPECT_EQ(t.offset % kParamAlignment, 0u) << t.name;
    EXPECT_GE(t.offset, end) << t.name;
    end = t.offset + t.size;
    EXPECT_EQ(t.weight_decay, t.shape.size() == 2) << t.name;
  }
  EXPECT_EQ(layout.total % kParamAlignment, 0u);
  EXPECT_GE(layout.total, end);
  EXPECT_EQ(layout.find("lm_head.weight"), nullptr);
  EXPECT_EQ(layout.find("embed_tokens.weight"), nullptr);
}

// The GPU step multiplies [Wq; Wk; Wv] and [Wk; Wv] as matrices: they are, exactly when the
// offsets' alignment leaves no gap after k_proj (kv_dim x width a multiple of it).
TEST(DflashLayoutTest, ProjectionsAdjacentUnlessAlignmentLeavesGaps) {
  const auto adjacent = [](const DflashConfig& c) {
    return dflash_projections_adjacent(c,
                                       dflash_layer_offsets(dflash_param_layout(c), c.num_layers));
  };
  DflashConfig c = small_dflash_config(3);
  for (const uint32_t kv : {1u, 2u, 4u})
    for (const uint32_t group : {1u, 2u, 3u})
      for (const uint32_t head_dim : {2u, 4u, 6u, 32u})
        for (const uint32_t width : {8u, 12u, 16u, 40u, 64u}) {
          c.num_kv_heads = kv;
          c.num_heads = kv * group;
          c.head_dim = head_dim;
          c.target_hidden = width;
          EXPECT_EQ(adjacent(c), size_t(kv) * head_dim * width % kParamAlignment == 0)
              << kv << " kv heads, " << group << " queries each, head_dim " << head_dim
              << ", width " << width;
        }
  c.num_heads = 32;  // qwen3-8b's shape
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.target_hidden = 4096;
  EXPECT_TRUE(adjacent(c));
}

TEST(DflashLayoutTest, InitIsDeterministicAndScaled) {
  const ParamLayout layout = dflash_param_layout(small_dflash_config());
  std::vector<float> a(layout.total), b(layout.total), other(layout.total);
  init_dflash_params<float>(layout, 7, a);
  init_dflash_params<float>(layout, 7, b);
  init_dflash_params<float>(layout, 8, other);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, other);
  std::vector<bool> used(layout.total, false);
  for (const ParamInfo& t : layout.tensors) {
    const float bound = t.shape.size() == 2 ? 1.0f / std::sqrt(float(t.shape[1])) : 0.0f;
    for (size_t i = t.offset; i < t.offset + t.size; ++i) {
      used[i] = true;
      if (t.shape.size() == 1) {
        ASSERT_EQ(a[i], 1.0f) << t.name;
      } else {
        ASSERT_LE(std::abs(a[i]), bound) << t.name;
      }
    }
  }
  for (size_t i = 0; i < used.size(); ++i)
    if (!used[i]) {
      ASSERT_EQ(a[i], 0.0f) << i;
    }
  // Two layers' weights of one shape differ: the name seeds each tensor.
  const ParamInfo& q0 = layout.at("layers.0.self_attn.q_proj.weight");
  const ParamInfo& q1 = layout.at("layers.1.self_attn.q_proj.weight");
  EXPECT_FALSE(std::equal(a.begin() + std::ptrdiff_t(q0.offset),
                          a.begin() + std::ptrdiff_t(q0.offset + q0.size),
                          a.begin() + std::ptrdiff_t(q1.offset)));
}

// The published rule (SpecForge's DFlash objective), stated as it is there, over a loss
// mask of the tokens rather than hsring's labels: position p anchors a block when the
// token at p and the token at p + 1 are both trained, and a context row precedes it.
bool published_anchor(const std::vector<int32_t>& offsets, const std::vector<bool>& trained,
                      int32_t p) {
  for (size_t d = 0; d + 1 < offsets.size(); ++d) {
    const int32_t s = offsets[d], e = offsets[d + 1];
    if (p < s || p >= e) continue;
    return p > s && p + 1 < e && trained[size_t(p)] && trained[size_t(p) + 1];
  }
  return false;
}

// hsring's labels of that data: row t is scored against the token at t + 1 when it is
// trained; a document's last row has none.
std::vector<int32_t> labels_of(const std::vector<int32_t>& offsets,
                               const std::vector<bool>& trained) {
  std::vector<int32_t> labels(trained.size(), -100);
  for (size_t d = 0; d + 1 < offsets.size(); ++d)
    for (int32_t t = offsets[d]; t + 1 < offsets[d + 1]; ++t)
      if (trained[size_t(t) + 1]) labels[size_t(t)] = 1000 + t + 1;
  return labels;
}

TEST(DflashAnchorsTest, EveryAnchorFollowsThePublishedRuleAndIsDistinctSortedSeeded) {
  const std::vector<int32_t> offsets = {0, 3, 40, 41, 90, 200};
  std::vector<bool> trained(200, true);
  for (size_t t = 50; t < 70; ++t) trained[t] = false;  // a prompt in the middle
  trained[100] = false;                                 // one untrained token
  const std::vector<int32_t> labels = labels_of(offsets, trained);
  const uint32_t bs = 6;
  const std::vector<int32_t> all = anchor_candidates(offsets, labels, bs);
  // Every row that passes the rule is a candidate, and no other.
  for (int32_t a = 0; a < 200; ++a)
    EXPECT_EQ(std::binary_search(all.begin(), all.end(), a), published_anchor(offsets, trained, a))
        << a;
  EXPECT_FALSE(std::binary_search(all.begin(), all.end(), 3));   // first row of a document
  EXPECT_TRUE(std::binary_search(all.begin(), all.end(), 35));   // its block runs past the end
  EXPECT_TRUE(std::binary_search(all.begin(), all.end(), 38));   // the token after it counts
  EXPECT_FALSE(std::binary_search(all.begin(), all.end(), 39));  // the document's last token
  EXPECT_FALSE(std::binary_search(all.begin(), all.end(), 49));  // the token after it: prompt
  EXPECT_FALSE(std::binary_search(all.begin(), all.end(), 55));  // inside the prompt
  EXPECT_TRUE(std::binary_search(all.begin(), all.end(), 70));   // the first response token
  EXPECT_FALSE(std::binary_search(all.begin(), all.end(), 99));  // 100 is not trained
  EXPECT_FALSE(std::binary_search(all.begin(), all.end(), 100));

  const std::vector<int32_t> a = sample_anchors(offsets, labels, bs, 20, 5);
  EXPECT_EQ(a.size(), 20u);
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  EXPECT_EQ(std::set<int32_t>(a.begin(), a.end()).size(), a.size());
  for (int32_t anchor : a) EXPECT_TRUE(published_anchor(offsets, trained, anchor)) << anchor;
  EXPECT_EQ(sample_anchors(offsets, labels, bs, 20, 5), a);
  EXPECT_NE(sample_anchors(offsets, labels, bs, 20, 6), a);
  // Fewer candidates than asked: all of them.
  EXPECT_EQ(sample_anchors(offsets, labels, bs, all.size(), 5), all);
  EXPECT_EQ(sample_anchors(offsets, labels, bs, 100000, 5), all);
  EXPECT_TRUE(sample_anchors(offsets, labels, bs, 0, 5).empty());
}

// A generated response after a prompt, as the default job's data is: no block starts in
// the prompt; the first response token anchors one; the response's last trained tokens
// anchor blocks the document's end cuts off, whose positions past it are not scored (and
// never read the next document's labels).
TEST(DflashAnchorsTest, PromptAndDocumentEndEdges) {
  const std::vector<int32_t> offsets = {0, 12, 20};
  std::vector<bool> trained(20, true);
  for (size_t t = 0; t < 5; ++t) trained[t] = false;  // prompt 0..4, response 5..11
  const std::vector<int32_t> labels = labels_of(offsets, trained);
  EXPECT_EQ(anchor_candidates(offsets, labels, 4),
            (std::vector<int32_t>{5, 6, 7, 8, 9, 10, 13, 14, 15, 16, 17, 18}));
  // The last prompt token's block would be scored on the response alone: still not an
  // anchor, since inference never anchors a block on a prompt token.
  EXPECT_FALSE(published_anchor(offsets, trained, 4));

  const std::vector<float> features(20 * 2 * 16, 0.0f);
  const std::vector<int32_t> tokens(20, 3);
  const std::vector<int32_t> positions = [] {
    std::vector<int32_t> p(20);
    for (int32_t t = 0; t < 20; ++t) p[size_t(t)] = t < 12 ? t : t - 12;
    return p;
  }();
  const std::vector<int32_t> anchors = {10};
  const DflashBatch batch{features, tokens, positions, offsets, labels, anchors};
  const DflashConfig config = small_dflash_config();  // block 4, mask token 12
  DflashBlockRows rows;
  build_dflash_block_rows(batch, config, rows);
  // Anchor 10: position 1 is token 11 (trained); position 2 is scored by the document's
  // last row, which has no next token; position 3 lies past the end, where row 12 holds
  // the next document's (counted) label 1013.
  ASSERT_EQ(labels[12], 1013);
  EXPECT_EQ(rows.labels, (std::vector<int32_t>{-1, 1011, -100, -1}));
  EXPECT_EQ(rows.positions, (std::vector<int32_t>{10, 11, 12, 13}));
  EXPECT_EQ(rows.context[0].begin, 0u);
  EXPECT_EQ(rows.context[0].end, 10u);
  EXPECT_GT(rows.weights[1], 0.0);
  EXPECT_EQ(rows.weights[2], 0.0);
  EXPECT_NO_THROW(validate_dflash_anchors(batch, config));
  // An anchor with no context row of its own document is refused.
  const std::vector<int32_t> first_row = {12};
  EXPECT_THROW(
      validate_dflash_anchors({features, tokens, positions, offsets, labels, first_row}, config),
      Error);
}

TEST(DflashAnchorsTest, SamplingIsRoughlyUniform) {
  const std::vector<int32_t> offsets = {0, 64};
  const std::vector<int32_t> labels(64, 1);
  const std::vector<int32_t> all = anchor_candidates(offsets, labels, 4);  // rows 1 .. 63
  ASSERT_EQ(all.size(), 63u);
  std::vector<int> hits(64, 0);
  for (uint64_t seed = 0; seed < 400; ++seed)
    for (int32_t a : sample_anchors(offsets, labels, 4, 10, seed)) ++hits[size_t(a)];
  // 4000 draws over 63 rows: about 63 each.
  for (int32_t a : all) {
    EXPECT_GT(hits[size_t(a)], 30) << a;
    EXPECT_LT(hits[size_t(a)], 110) << a;
  }
}

TEST(DflashAnchorsTest, NoCandidatesAndBadInput) {
  const std::vector<int32_t> labels(10, -100);
  EXPECT_TRUE(sample_anchors(std::vector<int32_t>{0, 10}, labels, 4, 5, 1).empty());
  const std::vector<int32_t> counted(10, 2);
  // Documents of one row have no context row before any anchor.
  EXPECT_TRUE(
      anchor_candidates(std::vector<int32_t>{0, 1, 2, 3}, std::vector<int32_t>(3, 2), 4).empty());
  EXPECT_EQ(anchor_candidates(std::vector<int32_t>{0, 5, 10}, counted, 4),
            (std::vector<int32_t>{1, 2, 3, 4, 6, 7, 8, 9}));
  EXPECT_THROW(anchor_candidates(std::vector<int32_t>{0, 9}, counted, 4), Error);
  EXPECT_THROW(anchor_candidates(std::vector<int32_t>{0, 5, 5, 10}, counted, 4), Error);
  EXPECT_THROW(anchor_candidates(std::vector<int32_t>{0, 10}, counted, 1), Error);
}

TEST(DflashAnchorsTest, DefaultCount) {
  EXPECT_EQ(default_anchor_count(16384), 512u);
  EXPECT_EQ(default_anchor_count(8192), 256u);
  EXPECT_EQ(default_anchor_count(1000), 31u);
  EXPECT_EQ(default_anchor_count(10), 1u);
  EXPECT_EQ(default_anchor_count(0), 1u);
}

TEST(DflashAcceptanceTest, LeadingMatchesUntilMissOrIgnored) {
  using V = std::vector<int32_t>;
  EXPECT_EQ(accepted_prefix(V{3, 4, 5}, V{3, 4, 5}), 3u);
  EXPECT_EQ(accepted_prefix(V{3, 4, 5}, V{3, 4, 9}), 2u);
  EXPECT_EQ(accepted_prefix(V{3, 4, 5}, V{0, 4, 5}), 0u);  // later matches do not count
  EXPECT_EQ(accepted_prefix(V{3, -100, 5}, V{3, 7, 5}), 1u);
  EXPECT_EQ(accepted_prefix(V{-100, 4}, V{0, 4}), 0u);
  EXPECT_EQ(accepted_prefix(V{}, V{}), 0u);
}

TEST(DflashAnchorsTest, LabelRowIsTheTargetsNextTokenBeforeThePosition) {
  // Position j of the block at anchor a is position a + j: the target's greedy token there
  // is its next-token label at row a + j - 1.
  EXPECT_EQ(dflash_label_row(10, 1), 10u);
  EXPECT_EQ(dflash_label_row(10, 15), 24u);
  EXPECT_TRUE(anchor_in_document(1, 0, 5));
  EXPECT_TRUE(anchor_in_document(4, 0, 5));
  EXPECT_FALSE(anchor_in_document(0, 0, 5));
  EXPECT_FALSE(anchor_in_document(5, 0, 5));
  const std::vector<int32_t> labels = {7, 8, 9, 10, 11};
  EXPECT_EQ(dflash_block_label(labels, 3, 1, 5), 10);
  EXPECT_EQ(dflash_block_label(labels, 3, 2, 5), 11);
  EXPECT_EQ(dflash_block_label(labels, 3, 3, 5), -1);
}

}  // namespace
}  // namespace hsring::train
