// The CUDA target forward against the fp32 CPU reference: same weights (the bf16 values the
// GPU holds), same packed batches; relative errors within bf16 rounding, greedy labels that
// agree, bit-identical repeats, documents independent of their neighbours, bad input refused.
#include "model/cuda_target_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/random.h"
#include "device_arrays.h"
#include "gpu/cuda_handles.h"
#include "gpu_test_util.h"
#include "model/cpu_target_model.h"
#include "model/cuda_delta_net.h"
#include "model/cuda_kernels.h"
#include "model/float_convert.h"
#include "model_test_util.h"

namespace hsring {
namespace {

using gpu_test::bf16_weights;
using gpu_test::relative_error;

struct Doc {
  uint32_t length = 1;
  int32_t first_position = 0;  // RoPE position of the first token
  uint32_t salt = 0;
};

struct Packed {
  std::vector<int32_t> tokens, positions, offsets{0};
  PackedBatch view() const { return {tokens, positions, offsets}; }
};

Packed pack(const std::vector<Doc>& docs, uint32_t vocab) {
  Packed p;
  for (const Doc& d : docs) {
    for (uint32_t i = 0; i < d.length; ++i) {
      p.tokens.push_back(int32_t((uint64_t(i) * 7919 + d.salt * 104729 + 13) % vocab));
      p.positions.push_back(d.first_position + int32_t(i));
    }
    p.offsets.push_back(int32_t(p.tokens.size()));
  }
  return p;
}

// Small shapes covering the optional paths (QK-norm, tied head, q/k/v biases), both GQA
// cases, the four head sizes, the scalar fallbacks (hidden size not a multiple of 4,
// intermediate not a multiple of 8), each scaled RoPE rule and the Qwen3.5 hybrid (DeltaNet
// layers, gated attention of head_dim 256 with partial RoPE, zero-centred norms): with
// small DeltaNet heads (also with a 6-tap convolution), and with the real model's 128 / 128
// heads in a 3:1 value grouping. gqa4-256 and qwen2-128: RoPE over the whole head at head_dim
// 256 with QK-norm and at 128 with biases (the shapes q/k/v finishing's in-lane kernel takes).
ModelConfig test_config(const std::string& kind) {
  ModelConfig c = named_model_config("tiny");  // qwen3, QK-norm, tied, GQA 2, head_dim 32
  c.num_layers = 4;
  if (kind == "qwen3_5" || kind == "qwen3_5-128" || kind == "qwen3_5-conv6") {
    c = named_model_config("qwen3.6-27b");
    c.name = "test-" + kind;
    c.hidden_size = 192;
    c.intermediate_size = 344;
    c.num_layers = 8;  // two groups of three DeltaNet layers and one attention layer
    c.layer_kinds.resize(8);
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 256;
    c.rotary_dim = 64;
    c.vocab_size = 611;
    c.delta_net =
        kind == "qwen3_5-128" ? DeltaNetShape{1, 3, 128, 128, 4} : DeltaNetShape{2, 4, 32, 16, 4};
    // A convolution longer than the taps launch_delta_conv holds in registers (4).
    if (kind == "qwen3_5-conv6") c.delta_net.conv_kernel = 6;
  } else if (kind == "qwen3_moe") {
    // Mixtures of 8 experts of 48, 2 per token, not renormalised (Qwen3-MoE's default), and
    // layer 1 a dense MLP (mlp_only_layers).
    c.name = "test-qwen3_moe";
    c.model_type = "qwen3_moe";
    c.mlp_kinds = {MlpKind::kExperts, MlpKind::kDense, MlpKind::kExperts, MlpKind::kExperts};
    c.moe = {8, 2, 48, 0, false};
  } else if (kind == "qwen3_5_moe") {
    // The hybrid of "qwen3_5" in four layers, every MLP 8 experts of 64, 2 per token,
    // renormalised, and a shared expert of 96.
    c = test_config("qwen3_5");
    c.name = "test-qwen3_5_moe";
    c.model_type = "qwen3_5_moe";
    c.num_layers = 4;
    c.layer_kinds.resize(4);
    c.intermediate_size = 0;
    c.mlp_kinds.assign(4, MlpKind::kExperts);
    c.moe = {8, 2, 64, 96, true};
  } else if (kind == "llama") {  // no QK-norm, untied, MHA, head_dim 64
    c.name = "test-llama";
    c.model_type = "llama";
    c.qk_norm = false;
    c.tie_embeddings = false;
    c.hidden_size = 198;
    c.intermediate_size = 520;
    c.num_heads = 4;
    c.num_kv_heads = 4;
    c.head_dim = 64;
    c.vocab_size = 500;
    c.num_layers = 3;
  } else if (kind == "gqa4") {  // QK-norm, untied, GQA 4, head_dim 128 (Qwen3-8B's)
    c.name = "test-gqa4";
    c.tie_embeddings = false;
    c.hidden_size = 192;
    c.intermediate_size = 340;
    c.num_heads = 8;
    c.num_kv_heads = 2;
    c.head_dim = 128;
    c.vocab_size = 1001;
    c.num_layers = 3;
    c.rope_theta = 1e6;
  } else if (kind == "gqa4-256") {  // gqa4 at head_dim 256 with RoPE over the whole head
    c = test_config("gqa4");
    c.name = "test-gqa4-256";
    c.head_dim = 256;
  } else if (kind == "qwen2-128") {  // qwen2 at head_dim 128 (Qwen2.5-7B's)
    c = test_config("qwen2");
    c.name = "test-qwen2-128";
    c.head_dim = 128;
  } else if (kind == "qwen2") {  // q/k/v biases, no QK-norm, untied, GQA 2, head_dim 64
    c.name = "test-qwen2";
    c.model_type = "qwen2";
    c.qk_norm = false;
    c.qkv_bias = true;
    c.tie_embeddings = false;
    c.hidden_size = 256;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 64;
    c.vocab_size = 700;
    c.num_layers = 3;
    c.rope_theta = 1e6;
  } else if (kind == "llama3" || kind == "linear" || kind == "dynamic" || kind == "yarn") {
    // Llama with scaled RoPE over a short "pretraining context", so the mixed documents
    // (positions up to 1300) fall in every band of each rule.
    c = test_config("llama");
    c.name = "test-llama-" + kind;
    c.rope_theta = 5e5;
    RopeScaling& r = c.rope;
    r.factor = 8;
    if (kind == "llama3") {
      r.type = RopeType::kLlama3;
      r.original_max_positions = 256;
    } else if (kind == "linear") {
      r.type = RopeType::kLinear;
      r.factor = 4;
    } else if (kind == "dynamic") {
      r.type = RopeType::kDynamic;
      r.factor = 2;
      r.max_positions = 128;  // the 130-, 300- and 70-token documents: grown, grown, plain
    } else {
      r.type = RopeType::kYarn;
      r.factor = 4;
      r.original_max_positions = 128;
      r.attention_factor = 0.1 * std::log(4.0) + 1;
    }
  }
  return c;
}

std::vector<float> rows(const std::vector<float>& m, size_t width, size_t begin, size_t n) {
  return {m.begin() + long(begin * width), m.begin() + long((begin + n) * width)};
}

// Positions whose GPU label is the CPU's, or is within `margin` of the CPU's best logit (a
// near-tie that bf16 rounding may break either way), out of all positions.
double label_agreement(const ForwardOutput& got, const ForwardOutput& want, uint32_t vocab,
                       double margin) {
  size_t agree = 0;
  for (size_t t = 0; t < want.greedy.size(); ++t) {
    const float* logits = want.logits.data() + t * vocab;
    agree +=
        got.greedy[t] == want.greedy[t] || logits[got.greedy[t]] >= logits[want.greedy[t]] - margin;
  }
  return double(agree) / double(want.greedy.size());
}

// The root-mean-square difference of two logit arrays: the scale of a near-tie.
double rms_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return std::sqrt(sum / double(a.size()));
}

ForwardRequest all_layers(const ModelConfig& c, bool logits) {
  ForwardRequest r;
  r.capture_layers.resize(c.num_layers);
  std::iota(r.capture_layers.begin(), r.capture_layers.end(), 0);
  r.logits = logits;
  return r;
}

// Documents of 1 to 300 tokens, some starting at non-zero positions, tile boundaries
// (64 rows) crossed and hit exactly.
std::vector<Doc> mixed_docs() {
  return {{1, 0, 1}, {70, 0, 2}, {130, 17, 3}, {1, 5, 4}, {64, 0, 5}, {300, 1000, 6}, {3, 0, 7}};
}

class CudaModelTest : public ::testing::TestWithParam<const char*> {};

// Mixtures of experts: bf16 rounding moves a router's logits by ~1e-3, enough to swap the
// k-th and (k+1)-th expert of a token whose two are nearly tied (the CPU in fp32 and
// transformers in bf16 differ the same way); such a token's rows then differ by a whole
// expert's output, from that layer on. So the bound is per token: 90% of the tokens of
// every layer, and of the logits, within the dense bound, and the labels of 90% agreeing.
// A grouping or GEMM bug breaks most tokens, not a few.
void expect_mixture_close(const ForwardOutput& got, const ForwardOutput& want,
                          const ForwardOutput& unrounded, const ModelConfig& c, const char* kind) {
  const size_t tokens = got.token_count;
  auto close_tokens = [&](const std::vector<float>& g, const std::vector<float>& w,
                          const std::vector<float>& u, size_t width) {
    const double bound = std::max(1e-2, 2 * relative_error(w, u));
    size_t close = 0;
    for (size_t t = 0; t < tokens; ++t)
      close += relative_error(rows(g, width, t, 1), rows(w, width, t, 1)) < bound;
    return double(close) / double(tokens);
  };
  for (uint32_t layer = 0; layer < c.num_layers; ++layer) {
    const double share = close_tokens(got.captured[layer], want.captured[layer],
                                      unrounded.captured[layer], c.hidden_size);
    std::printf("[   INFO   ] %s layer %u: %.4f of tokens within bounds (relative error %.3e)\n",
                kind, layer, share, relative_error(got.captured[layer], want.captured[layer]));
    EXPECT_GE(share, 0.9) << "layer " << layer;
  }
  const double logits = close_tokens(got.logits, want.logits, unrounded.logits, c.vocab_size);
  const double margin = 4 * rms_difference(got.logits, want.logits);
  const double agreement = label_agreement(got, want, c.vocab_size, margin);
  std::printf("[   INFO   ] %s logits: %.4f of tokens within bounds, labels %.4f\n", kind, logits,
              agreement);
  EXPECT_GE(logits, 0.9);
  EXPECT_GE(agreement, 0.9);
}

// The bound on each relative error: 1e-2, or twice what rounding the weights to bf16 alone
// does to the fp32 CPU forward where that is more (the Qwen3.5 shapes: a gated RMSNorm over
// a DeltaNet output near zero magnifies any bf16 rounding, the GPU's or the weights').
TEST_P(CudaModelTest, MatchesTheCpuReference) {
  HSRING_REQUIRE_GPUS(1);
  const ModelConfig c = test_config(GetParam());
  const ModelWeights w = random_weights(c, 42);
  CudaTargetModel gpu_model(c, w, 0);
  CpuTargetModel cpu_model(c, bf16_weights(c, w), {2});
  CpuTargetModel fp32_model(c, w, {2});
  const Packed p = pack(mixed_docs(), c.vocab_size);
  ForwardOutput got, want, unrounded;
  gpu_model.forward(p.view(), all_layers(c, true), got);
  cpu_model.forward(p.view(), all_layers(c, true), want);
  fp32_model.forward(p.view(), all_layers(c, true), unrounded);
  ASSERT_EQ(got.token_count, p.tokens.size());
  ASSERT_EQ(got.captured.size(), c.num_layers);
  if (c.has_experts()) {
    expect_mixture_close(got, want, unrounded, c, GetParam());
    return;
  }
  for (uint32_t layer = 0; layer < c.num_layers; ++layer) {
    const double err = relative_error(got.captured[layer], want.captured[layer]);
    const double floor = relative_error(want.captured[layer], unrounded.captured[layer]);
    std::printf("[   INFO   ] %s layer %u relative error %.3e (bf16 weights alone: %.3e)\n",
                GetParam(), layer, err, floor);
    EXPECT_LT(err, std::max(1e-2, 2 * floor)) << "layer " << layer;
  }
  const double logits_err = relative_error(got.logits, want.logits);
  const double logits_floor = relative_error(want.logits, unrounded.logits);
  std::printf("[   INFO   ] %s logits relative error %.3e (bf16 weights alone: %.3e)\n", GetParam(),
              logits_err, logits_floor);
  EXPECT_LT(logits_err, std::max(1e-2, 2 * logits_floor));
  size_t exact = 0;
  for (size_t t = 0; t < p.tokens.size(); ++t) exact += got.greedy[t] == want.greedy[t];
  const double margin = 4 * rms_difference(got.logits, want.logits);
  const double agreement = label_agreement(got, want, c.vocab_size, margin);
  std::printf(
      "[   INFO   ] %s greedy labels equal %zu / %zu, agreement %.4f (near-tie margin %.3g)\n",
      GetParam(), exact, p.tokens.size(), agreement, margin);
  EXPECT_GE(agreement, 0.99);
}

TEST_P(CudaModelTest, RepeatsAreBitIdentical) {
  HSRING_REQUIRE_GPUS(1);
  const ModelConfig c = test_config(GetParam());
  CudaTargetModel model(c, random_weights(c, 7), 0);
  const Packed p = pack(mixed_docs(), c.vocab_size);
  ForwardOutput a, b, other;
  model.forward(p.view(), all_layers(c, true), a);
  // A different batch in between: no state may leak from one forward into the next.
  model.forward(pack({{40, 0, 9}}, c.vocab_size).view(), all_layers(c, false), other);
  model.forward(p.view(), all_layers(c, true), b);
  EXPECT_EQ(a.captured, b.captured);
  EXPECT_EQ(a.logits, b.logits);
  EXPECT_EQ(a.greedy, b.greedy);
}

TEST_P(CudaModelTest, DocumentsDoNotDependOnTheirNeighbours) {
  HSRING_REQUIRE_GPUS(1);
  const ModelConfig c = test_config(GetParam());
  CudaTargetModel model(c, random_weights(c, 9), 0);
  const Doc x{150, 0, 11};
  const Packed alone = pack({x}, c.vocab_size);
  const Packed packed = pack({{90, 0, 12}, x, {33, 4, 13}}, c.vocab_size);
  ForwardOutput a, b;
  model.forward(alone.view(), all_layers(c, true), a);
  model.forward(packed.view(), all_layers(c, true), b);
  // Different token counts may make cuBLAS pick other kernels: equal within rounding.
  double worst = 0;
  for (uint32_t layer = 0; layer < c.num_layers; ++layer) {
    const double err =
        relative_error(rows(b.captured[layer], c.hidden_size, 90, x.length), a.captured[layer]);
    worst = std::max(worst, err);
    EXPECT_LT(err, 1e-2) << "layer " << layer;
  }
  ForwardOutput b_doc;
  b_doc.greedy.assign(b.greedy.begin() + 90, b.greedy.begin() + 90 + x.length);
  b_doc.logits = rows(b.logits, c.vocab_size, 90, x.length);
  const double margin = 4 * rms_difference(b_doc.logits, a.logits);
  const double agreement = label_agreement(b_doc, a, c.vocab_size, margin);
  std::printf("[   INFO   ] %s packed vs alone: worst layer relative error %.3e, labels %.4f\n",
              GetParam(), worst, agreement);
  EXPECT_GE(agreement, 0.99);
}

// Each test named for its shape ('-' as '_'), so that a filter such as '*qwen3_5*' picks
// the shapes it names.
INSTANTIATE_TEST_SUITE_P(Shapes, CudaModelTest,
                         ::testing::Values("qwen", "llama", "gqa4", "gqa4-256", "qwen2",
                                           "qwen2-128", "llama3", "linear", "dynamic", "yarn",
                                           "qwen3_5", "qwen3_5-128", "qwen3_5-conv6", "qwen3_moe",
                                           "qwen3_5_moe"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// The attention kernels alone, with and without GQA packing, against a double-precision
// reference on the same bf16 inputs, at the head dims the wgmma kernel takes (on a GPU
// without it, the mma.sync kernels only).
class CudaAttentionTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(CudaAttentionTest, PackedAndPerHeadBlocksMatchAReference) {
  HSRING_REQUIRE_GPUS(1);
  const uint32_t heads = 8, kv_heads = 2, d = GetParam();
  const std::vector<int32_t> offsets = {0, 1, 18, 82, 147, 347, 350};
  const uint32_t t = 350;
  uint64_t state = 99;
  const auto random_bf16 = [&](size_t n, float scale) {
    std::vector<uint16_t> bits(n);
    for (uint16_t& b : bits)
      b = float_to_bf16(scale * (float(splitmix64(state) >> 40) / float(1 << 24) - 0.5f));
    return bits;
  };
  // Large q and k: peaked softmax rows, where a wrong mask or scale shows.
  const std::vector<uint16_t> q = random_bf16(size_t(t) * heads * d, 6.0f);
  const std::vector<uint16_t> k = random_bf16(size_t(t) * kv_heads * d, 6.0f);
  const std::vector<uint16_t> v = random_bf16(size_t(t) * kv_heads * d, 2.0f);
  gpu::DeviceBuffer dq = gpu::DeviceBuffer::allocate(q.size() * 2);
  gpu::DeviceBuffer dk = gpu::DeviceBuffer::allocate(k.size() * 2);
  gpu::DeviceBuffer dv = gpu::DeviceBuffer::allocate(v.size() * 2);
  gpu::DeviceBuffer dout = gpu::DeviceBuffer::allocate(q.size() * 2);
  HSRING_CUDA_CHECK(cudaMemcpy(dq.data(), q.data(), dq.size(), cudaMemcpyHostToDevice));
  HSRING_CUDA_CHECK(cudaMemcpy(dk.data(), k.data(), dk.size(), cudaMemcpyHostToDevice));
  HSRING_CUDA_CHECK(cudaMemcpy(dv.data(), v.data(), dv.size(), cudaMemcpyHostToDevice));

  std::vector<float> want(q.size());
  for (size_t doc = 0; doc + 1 < offsets.size(); ++doc)
    for (int32_t row = offsets[doc]; row < offsets[doc + 1]; ++row)
      for (uint32_t h = 0; h < heads; ++h) {
        const size_t kvh = h / (heads / kv_heads);
        std::vector<double> p;
        double top = -1e300, total = 0;
        for (int32_t key = offsets[doc]; key <= row; ++key) {
          double dot = 0;
          for (uint32_t i = 0; i < d; ++i)
            dot += double(bf16_to_float(q[(size_t(row) * heads + h) * d + i])) *
                   bf16_to_float(k[(size_t(key) * kv_heads + kvh) * d + i]);
          p.push_back(dot / std::sqrt(double(d)));
          top = std::max(top, p.back());
        }
        for (double& x : p) total += (x = std::exp(x - top));
        for (uint32_t i = 0; i < d; ++i) {
          double sum = 0;
          for (size_t j = 0; j < p.size(); ++j)
            sum += p[j] * bf16_to_float(v[((offsets[doc] + j) * kv_heads + kvh) * d + i]);
          want[(size_t(row) * heads + h) * d + i] = float(sum / total);
        }
      }

  struct Variant {
    uint32_t pack;
    AttentionKernel kernel;
  };
  // Per kernel: one head a block, then packed; packing changes which block computes a row,
  // never how, so the same bits.
  for (const AttentionKernel kernel :
       {AttentionKernel::kMmaSync64, AttentionKernel::kMmaSync32, AttentionKernel::kWgmma}) {
    if (!attention_kernel_runs(kernel, d)) {
      std::printf("[   INFO   ] the wgmma kernel does not run here: not checked\n");
      continue;
    }
    std::vector<std::vector<uint16_t>> outputs;
    for (const uint32_t pack : {1u, 2u, 4u}) {
      const std::vector<AttentionTile> tiles =
          attention_tiles(offsets.data(), offsets.size(), pack);
      gpu::DeviceBuffer dtiles = gpu::DeviceBuffer::allocate(tiles.size() * sizeof(tiles[0]));
      HSRING_CUDA_CHECK(
          cudaMemcpy(dtiles.data(), tiles.data(), dtiles.size(), cudaMemcpyHostToDevice));
      HSRING_CUDA_CHECK(cudaMemset(dout.data(), 0xFF, dout.size()));  // NaNs where unwritten
      HSRING_CUDA_CHECK(launch_attention(dq.as<Bf16>(), dk.as<Bf16>(), dv.as<Bf16>(),
                                         dtiles.as<AttentionTile>(), uint32_t(tiles.size()), heads,
                                         kv_heads, d, pack, dout.as<Bf16>(), nullptr, kernel));
      std::vector<uint16_t> got(q.size());
      HSRING_CUDA_CHECK(cudaMemcpy(got.data(), dout.data(), dout.size(), cudaMemcpyDeviceToHost));
      std::vector<float> got_f(got.size());
      for (size_t i = 0; i < got.size(); ++i) got_f[i] = bf16_to_float(got[i]);
      const double err = relative_error(got_f, want);
      std::printf("[   INFO   ] attention kernel %d, head_dim %u, pack %u: relative error %.3e\n",
                  int(kernel), d, pack, err);
      EXPECT_LT(err, 1e-2) << "kernel " << int(kernel) << ", pack " << pack;
      outputs.push_back(std::move(got));
    }
    EXPECT_EQ(outputs[0], outputs[1]) << "kernel " << int(kernel);
    EXPECT_EQ(outputs[0], outputs[2]) << "kernel " << int(kernel);
  }
  EXPECT_EQ(max_attention_pack(32, 8), 4u);
  EXPECT_EQ(max_attention_pack(12, 4), 1u);
  EXPECT_EQ(max_attention_pack(24, 2), 4u);
}

INSTANTIATE_TEST_SUITE_P(HeadDims, CudaAttentionTest, ::testing::Values(128u, 256u),
                         [](const ::testing::TestParamInfo<uint32_t>& info) {
                           return "head_dim_" + std::to_string(info.param);
                         });

// q/k/v finishing's kernels against a double reference: the bias, the per-head RMSNorm,
// then RoPE pairing i with i + rotary_dim / 2 (HF rotate_half). Shapes: QK-norm at head_dim
// 128 and 256 and biases at 128 (both kernels run), and Qwen3.5's gated q with RoPE on 64
// of 256 dims (kStaged only; kInLane is refused). 37 rows: the last block is part-filled.
struct QkvFinishCase {
  const char* name;
  uint32_t head_dim, rotary_dim;
  bool qk_norm, bias, gated;
};

class QkvFinishTest : public ::testing::TestWithParam<QkvFinishCase> {};

TEST_P(QkvFinishTest, EachKernelMatchesAReference) {
  HSRING_REQUIRE_GPUS(1);
  const QkvFinishCase& param = GetParam();
  DecoderLayerShape layer;
  layer.heads = 4;
  layer.kv_heads = 2;
  layer.head_dim = param.head_dim;
  layer.rotary_dim = param.rotary_dim;
  layer.eps = 1e-6;
  layer.attention_gate = param.gated;
  const uint32_t t = 37, hd = param.head_dim, slots = 4 + 2 * 2;
  const uint32_t rot = param.rotary_dim ? param.rotary_dim : hd, half = rot / 2;
  const uint64_t q_width = (param.gated ? 2 : 1) * layer.q_dim();
  const uint64_t width = q_width + 2 * layer.kv_dim();
  uint64_t state = 7 + hd;
  std::vector<uint16_t> qkv(t * width);
  for (uint16_t& x : qkv) x = float_to_bf16(gpu_test::uniform(state, 3.0f));
  const std::vector<float> bias = gpu_test::uniform_values(slots * hd, state, 0.5f);
  const std::vector<float> norms = gpu_test::uniform_values(2 * hd, state, 2.0f);
  const std::vector<float> angles = gpu_test::uniform_values(2 * t * half, state, 1.0f);

  // The reference, head by head in slot order: q heads, k heads, v heads.
  std::vector<float> want(t * uint64_t(slots) * hd);
  for (uint32_t r = 0; r < t; ++r)
    for (uint32_t slot = 0; slot < slots; ++slot) {
      const bool is_q = slot < 4, is_v = slot >= 6;
      const uint64_t at =
          is_q ? uint64_t(slot) * hd * (param.gated ? 2 : 1) : q_width + uint64_t(slot - 4) * hd;
      std::vector<double> x(hd);
      double squares = 0;
      for (uint32_t i = 0; i < hd; ++i) {
        x[i] = bf16_to_float(qkv[r * width + at + i]) + (param.bias ? bias[slot * hd + i] : 0.0);
        squares += x[i] * x[i];
      }
      float* out = want.data() + (uint64_t(r) * slots + slot) * hd;
      if (is_v) {
        std::copy(x.begin(), x.end(), out);
        continue;
      }
      if (param.qk_norm) {
        const double scale = 1 / std::sqrt(squares / hd + layer.eps);
        for (uint32_t i = 0; i < hd; ++i) x[i] *= scale * norms[(is_q ? 0 : hd) + i];
      }
      const float* c = angles.data() + uint64_t(r) * half;
      const float* s = angles.data() + uint64_t(t + r) * half;
      for (uint32_t i = 0; i < hd; ++i)
        out[i] = float(i < half  ? x[i] * c[i] - x[i + half] * s[i]
                       : i < rot ? x[i] * c[i - half] + x[i - half] * s[i - half]
                                 : x[i]);
    }

  const gpu::DeviceBuffer d_qkv = gpu_test::to_device(qkv);
  const gpu::DeviceBuffer d_bias = gpu_test::to_device(bias);
  const gpu::DeviceBuffer d_norms = gpu_test::to_device(norms);
  const gpu::DeviceBuffer d_angles = gpu_test::to_device(angles);
  gpu::DeviceBuffer d_out = gpu::DeviceBuffer::allocate(want.size() * 2);
  auto* q = d_out.as<Bf16>();
  Bf16* k = q + uint64_t(t) * layer.q_dim();
  Bf16* v = k + uint64_t(t) * layer.kv_dim();
  std::vector<std::vector<float>> results;
  for (const QkvFinishKernel kernel : {QkvFinishKernel::kStaged, QkvFinishKernel::kInLane}) {
    HSRING_CUDA_CHECK(cudaMemset(d_out.data(), 0xFF, d_out.size()));  // NaNs where unwritten
    const cudaError_t launched =
        launch_qkv_finish(d_qkv.as<Bf16>(), t, layer, param.bias ? d_bias.as<float>() : nullptr,
                          param.qk_norm ? d_norms.as<float>() : nullptr,
                          param.qk_norm ? d_norms.as<float>() + hd : nullptr, d_angles.as<float>(),
                          d_angles.as<float>() + uint64_t(t) * half, q, k, v, nullptr, kernel);
    if (!qkv_finish_kernel_runs(kernel, layer)) {
      EXPECT_EQ(launched, cudaErrorNotSupported);
      continue;
    }
    HSRING_CUDA_CHECK(launched);
    const std::vector<uint16_t> out = gpu_test::to_host<uint16_t>(d_out, want.size());
    // The kernels write q [t, heads, hd], k and v [t, kv_heads, hd]: back to slot order.
    std::vector<float> got(want.size());
    for (uint32_t r = 0; r < t; ++r)
      for (uint32_t slot = 0; slot < slots; ++slot) {
        const uint64_t from = slot < 4   ? (uint64_t(r) * 4 + slot) * hd
                              : slot < 6 ? uint64_t(t) * 4 * hd + (uint64_t(r) * 2 + slot - 4) * hd
                                         : uint64_t(t) * 6 * hd + (uint64_t(r) * 2 + slot - 6) * hd;
        for (uint32_t i = 0; i < hd; ++i)
          got[(uint64_t(r) * slots + slot) * hd + i] = bf16_to_float(out[from + i]);
      }
    const double err = relative_error(got, want);
    std::printf("[   INFO   ] %s, kernel %d: relative error %.3e\n", param.name, int(kernel), err);
    EXPECT_LT(err, 5e-3) << "kernel " << int(kernel);  // one bf16 rounding: 2^-8 a value
    results.push_back(std::move(got));
  }
  // Both kernels: the same bits, but for a product the compiler fused into an add.
  if (results.size() == 2) {
    size_t apart = 0;
    for (size_t i = 0; i < want.size(); ++i)
      apart += std::abs(results[0][i] - results[1][i]) > 1e-2f * std::abs(results[0][i]);
    EXPECT_EQ(apart, 0u) << "values more than one bf16 step apart";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, QkvFinishTest,
    ::testing::Values(QkvFinishCase{"qk_norm_128", 128, 0, true, false, false},
                      QkvFinishCase{"qk_norm_256", 256, 256, true, false, false},
                      QkvFinishCase{"bias_128", 128, 0, false, true, false},
                      QkvFinishCase{"gated_partial_256", 256, 64, true, false, true}),
    [](const ::testing::TestParamInfo<QkvFinishCase>& info) {
      return std::string(info.param.name);
    });

TEST(CudaModelDeviceTest, ForwardDeviceWritesEveryLayoutAndDtype) {
  HSRING_REQUIRE_GPUS(1);
  const ModelConfig c = test_config("gqa4");
  CudaTargetModel model(c, random_weights(c, 3), 0);
  const Packed p = pack(mixed_docs(), c.vocab_size);
  const size_t t = p.tokens.size();
  const size_t h = c.hidden_size;
  ForwardRequest r;
  r.capture_layers = {2, 0};
  ForwardOutput host;
  model.forward(p.view(), r, host);

  gpu::Stream stream = gpu::make_stream();
  // Concatenated bf16 [T, K*H] and split fp16 [T, H] x K, with greedy labels.
  gpu::DeviceBuffer concat = gpu::DeviceBuffer::allocate(t * 2 * h * 2);
  gpu::DeviceBuffer split = gpu::DeviceBuffer::allocate(2 * t * h * 2);
  gpu::DeviceBuffer greedy = gpu::DeviceBuffer::allocate(t * 4);
  DeviceCapture bf16_out{DType::kBF16,
                         {{concat.data(), 2 * h * 2}, {concat.data() + h * 2, 2 * h * 2}},
                         greedy.as<int32_t>(),
                         nullptr};
  model.forward_device(p.view(), r, stream.get(), bf16_out);
  std::vector<uint16_t> concat_bits(t * 2 * h);
  std::vector<int32_t> labels(t);
  HSRING_CUDA_CHECK(cudaMemcpyAsync(concat_bits.data(), concat.data(), concat.size(),
                                    cudaMemcpyDeviceToHost, stream.get()));
  HSRING_CUDA_CHECK(
      cudaMemcpyAsync(labels.data(), greedy.data(), t * 4, cudaMemcpyDeviceToHost, stream.get()));
  DeviceCapture fp16_out{
      DType::kFP16, {{split.data(), h * 2}, {split.data() + t * h * 2, h * 2}}, nullptr, nullptr};
  r.greedy = false;
  model.forward_device(p.view(), r, stream.get(), fp16_out);
  std::vector<uint16_t> split_bits(2 * t * h);
  HSRING_CUDA_CHECK(cudaMemcpyAsync(split_bits.data(), split.data(), split.size(),
                                    cudaMemcpyDeviceToHost, stream.get()));
  HSRING_CUDA_CHECK(cudaStreamSynchronize(stream.get()));

  size_t mismatches = 0;
  for (size_t k = 0; k < 2; ++k)
    for (size_t row = 0; row < t; ++row)
      for (size_t d = 0; d < h; ++d) {
        const float v = host.captured[k][row * h + d];
        mismatches += concat_bits[row * 2 * h + k * h + d] != float_to_bf16(v);
        mismatches += split_bits[k * t * h + row * h + d] != float_to_fp16(v);
      }
  EXPECT_EQ(mismatches, 0u);
  EXPECT_EQ(labels, host.greedy);
}

TEST(CudaModelDeviceTest, RandomPresetWeightsEqualTheHostOnes) {
  HSRING_REQUIRE_GPUS(1);
  for (const char* kind : {"qwen", "gqa4", "qwen2", "qwen3_5", "qwen3_moe", "qwen3_5_moe"}) {
    const ModelConfig c = test_config(kind);
    const ModelWeights want = bf16_weights(c, random_weights(c, 5));
    const ModelWeights got = CudaTargetModel::with_random_weights(c, 5, 0)->download_weights();
    std::vector<std::string> names;
    std::vector<const std::vector<float>*> expected;
    for_each_weight(c, want, [&](const std::string& name, const auto&, const auto& values) {
      names.push_back(name);
      expected.push_back(&values);
    });
    size_t i = 0;
    for_each_weight(c, got, [&](const std::string& name, const auto&, const auto& values) {
      ASSERT_EQ(name, names[i]);
      EXPECT_TRUE(values == *expected[i]) << kind << ": tensor " << name << " differs";
      ++i;
    });
    // And uploads keep exactly the bf16 rounding too.
    const ModelWeights uploaded = CudaTargetModel(c, random_weights(c, 5), 0).download_weights();
    EXPECT_EQ(uploaded.embed_tokens, want.embed_tokens);
    EXPECT_EQ(uploaded.layers[1].gate_proj, want.layers[1].gate_proj);
    EXPECT_EQ(uploaded.layers[1].v_proj, want.layers[1].v_proj);
    EXPECT_EQ(uploaded.layers[1].k_bias, want.layers[1].k_bias);  // fp32, as they are
    EXPECT_EQ(uploaded.layers[1].delta_net.in_proj_a, want.layers[1].delta_net.in_proj_a);
    EXPECT_EQ(uploaded.layers[1].delta_net.a_log, want.layers[1].delta_net.a_log);
    if (c.has_experts()) {
      const MoeWeights& up = uploaded.layers[2].moe;
      const MoeWeights& ref = want.layers[2].moe;
      EXPECT_EQ(up.router, ref.router);
      EXPECT_EQ(up.experts[7].up_proj, ref.experts[7].up_proj);
      EXPECT_EQ(up.experts[5].down_proj, ref.experts[5].down_proj);
      EXPECT_EQ(up.shared.gate_proj, ref.shared.gate_proj);
      EXPECT_EQ(up.shared_gate, ref.shared_gate);
    }
  }
}

TEST(CudaModelDeviceTest, OpenPresetMatchesTheCpuModelOnItsWeights) {
  HSRING_REQUIRE_GPUS(1);
  std::unique_ptr<CudaTargetModel> model = open_cuda_model("tiny", 3, 0);
  const ModelConfig& c = model->config();
  CpuTargetModel reference(c, model->download_weights(), {2});
  const Packed p = pack({{200, 0, 1}, {57, 0, 2}}, c.vocab_size);
  ForwardRequest r;
  r.capture_layers = default_capture_layers(c.num_layers, 5);
  r.logits = true;
  ForwardOutput got, want;
  model->forward(p.view(), r, got);
  reference.forward(p.view(), r, want);
  for (size_t k = 0; k < r.capture_layers.size(); ++k)
    EXPECT_LT(relative_error(got.captured[k], want.captured[k]), 1e-2);
  const double margin = 4 * rms_difference(got.logits, want.logits);
  EXPECT_GE(label_agreement(got, want, c.vocab_size, margin), 0.99);
}

TEST(CudaModelDeviceTest, BadInputIsRefused) {
  HSRING_REQUIRE_GPUS(1);
  const ModelConfig c = named_model_config("tiny");
  CudaTargetModel model(c, random_weights(c, 1), 0);
  ForwardOutput out;
  const auto error = [&](std::vector<int32_t> tokens, std::vector<int32_t> positions,
                         std::vector<int32_t> offsets, std::vector<int32_t> layers = {0}) {
    ForwardRequest r;
    r.capture_layers = layers;
    try {
      model.forward({tokens, positions, offsets}, r, out);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kModel);
      return std::string(e.what());
    }
    ADD_FAILURE() << "accepted";
    return std::string();
  };
  EXPECT_NE(error({}, {}, {0}).find("no tokens"), std::string::npos);
  EXPECT_NE(error({1, 2}, {0}, {0, 2}).find("2 tokens but 1 positions"), std::string::npos);
  EXPECT_NE(error({1, 2}, {0, 1}, {0, 1})
                .find("must run from 0 to the token count 2 (they run from 0 to 1)"),
            std::string::npos);
  EXPECT_NE(error({1, 2}, {0, 1}, {0, 1, 1, 2}).find("must increase"), std::string::npos);
  EXPECT_NE(error({1, 256}, {0, 1}, {0, 2}).find("outside the vocabulary"), std::string::npos);
  EXPECT_NE(error({1, 2}, {0, -1}, {0, 2}).find("negative"), std::string::npos);
  EXPECT_NE(error({1, 2}, {0, 1}, {0, 2}, {6}).find("capture layer 6 is outside [0, 6)"),
            std::string::npos);

  // Device captures that do not match the request.
  gpu::Stream stream = gpu::make_stream();
  gpu::DeviceBuffer buffer = gpu::DeviceBuffer::allocate(4 * c.hidden_size * 4);
  const std::vector<int32_t> tokens{1, 2}, positions{0, 1}, offsets{0, 2};
  ForwardRequest r;
  r.capture_layers = {1};
  const auto device_error = [&](const DeviceCapture& capture) {
    try {
      model.forward_device({tokens, positions, offsets}, r, stream.get(), capture);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kModel);
      return std::string(e.what());
    }
    ADD_FAILURE() << "accepted";
    return std::string();
  };
  EXPECT_NE(device_error({DType::kBF16, {}, buffer.as<int32_t>(), nullptr}).find("0 regions for 1"),
            std::string::npos);
  EXPECT_NE(device_error({DType::kBF16, {{buffer.data(), 64}}, buffer.as<int32_t>(), nullptr})
                .find("row pitch of 64 bytes"),
            std::string::npos);
  EXPECT_NE(device_error({DType::kBF16, {{buffer.data(), 256}}, nullptr, nullptr})
                .find("greedy labels requested without a buffer"),
            std::string::npos);
  HSRING_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
}

// A DeltaNet shape the kernels are not built for is refused before touching a GPU, naming
// the dims.
TEST(CudaModelDeviceTest, UnsupportedDeltaNetShapesAreRefusedNamingTheDims) {
  ModelConfig c = test_config("qwen3_5");
  c.delta_net.qk_head_dim = 12;
  try {
    CudaTargetModel::with_random_weights(c, 1, 0);
    FAIL() << "DeltaNet q/k heads of 12 were accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kModelBadConfig);
    EXPECT_NE(std::string(e.what()).find("DeltaNet head dims 12 / 16"), std::string::npos)
        << e.what();
  }
  // Value heads too: bf16 q | k | v rows put each head 16 bytes apart.
  c = test_config("qwen3_5");
  c.delta_net.v_head_dim = 12;
  try {
    CudaTargetModel::with_random_weights(c, 1, 0);
    FAIL() << "DeltaNet value heads of 12 were accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kModelBadConfig);
    EXPECT_NE(std::string(e.what()).find("DeltaNet head dims 32 / 12"), std::string::npos)
        << e.what();
  }
}

// The chunked delta rule against the recurrent kernel (one token after another, as
// gated_delta_rule) on the same inputs: documents of 1 token, under a chunk,
// exactly one chunk and several chunks with a short tail; decays from none to strong.
TEST(CudaDeltaRuleTest, ChunkedMatchesTheRecurrentOracle) {
  HSRING_REQUIRE_GPUS(1);
  const std::vector<int32_t> offsets = {0, 1, 18, 82, 147, 347, 350};
  const uint32_t t = 350;
  const std::vector<DeltaSpan> chunks = delta_chunks(offsets.data(), offsets.size());
  const std::vector<DeltaSpan> docs = delta_documents(offsets.data(), offsets.size());
  ASSERT_EQ(chunks.size(), 1u + 1 + 1 + 2 + 4 + 1);
  EXPECT_EQ(docs[0].begin, 147);  // the longest first
  for (const DeltaNetShape shape :
       {DeltaNetShape{2, 6, 128, 128, 4}, DeltaNetShape{1, 2, 16, 8, 4}}) {
    uint64_t state = 17 + shape.qk_head_dim;
    const auto uniform = [&]() { return float(splitmix64(state) >> 40) / float(1 << 24); };
    const size_t c = shape.conv_dim();
    std::vector<float> qkv(size_t(t) * c);
    for (float& x : qkv) x = uniform() - 0.5f;
    // q and k normalised (q also scaled) as launch_delta_conv leaves them.
    for (size_t r = 0; r < t; ++r)
      for (size_t head = 0; head < 2 * shape.qk_heads; ++head) {
        float* x = qkv.data() + r * c + head * shape.qk_head_dim;
        double squares = 0;
        for (size_t i = 0; i < shape.qk_head_dim; ++i) squares += double(x[i]) * x[i];
        double scale = 1 / std::sqrt(squares + 1e-6);
        if (head < shape.qk_heads) scale /= std::sqrt(double(shape.qk_head_dim));
        for (size_t i = 0; i < shape.qk_head_dim; ++i) x[i] = float(x[i] * scale);
      }
    std::vector<float> g(size_t(t) * shape.v_heads), beta(g.size());
    for (size_t i = 0; i < g.size(); ++i) {
      // Mostly mild decays, some none, some strong (exp(-8)).
      const float u = uniform();
      g[i] = u < 0.1f ? 0.0f : u > 0.95f ? -8.0f * uniform() : -0.3f * uniform();
      beta[i] = uniform();
    }
    gpu::DeviceBuffer d_qkv = gpu::DeviceBuffer::allocate(qkv.size() * 4);
    gpu::DeviceBuffer d_g = gpu::DeviceBuffer::allocate(g.size() * 4);
    gpu::DeviceBuffer d_beta = gpu::DeviceBuffer::allocate(g.size() * 4);
    gpu::DeviceBuffer d_chunks = gpu::DeviceBuffer::allocate(chunks.size() * sizeof(chunks[0]));
    gpu::DeviceBuffer d_docs = gpu::DeviceBuffer::allocate(docs.size() * sizeof(docs[0]));
    gpu::DeviceBuffer scratch = gpu::DeviceBuffer::allocate(delta_scratch_floats(t, shape) * 4);
    gpu::DeviceBuffer d_out = gpu::DeviceBuffer::allocate(size_t(t) * shape.v_dim() * 4);
    gpu::DeviceBuffer d_want = gpu::DeviceBuffer::allocate(size_t(t) * shape.v_dim() * 4);
    HSRING_CUDA_CHECK(cudaMemcpy(d_qkv.data(), qkv.data(), d_qkv.size(), cudaMemcpyHostToDevice));
    HSRING_CUDA_CHECK(cudaMemcpy(d_g.data(), g.data(), d_g.size(), cudaMemcpyHostToDevice));
    HSRING_CUDA_CHECK(
        cudaMemcpy(d_beta.data(), beta.data(), d_beta.size(), cudaMemcpyHostToDevice));
    HSRING_CUDA_CHECK(
        cudaMemcpy(d_chunks.data(), chunks.data(), d_chunks.size(), cudaMemcpyHostToDevice));
    HSRING_CUDA_CHECK(
        cudaMemcpy(d_docs.data(), docs.data(), d_docs.size(), cudaMemcpyHostToDevice));
    HSRING_CUDA_CHECK(launch_delta_rule_recurrent(
        d_qkv.as<float>(), d_g.as<float>(), d_beta.as<float>(), shape, d_docs.as<DeltaSpan>(),
        uint32_t(docs.size()), d_want.as<float>(), nullptr));
    std::vector<float> want(size_t(t) * shape.v_dim());
    HSRING_CUDA_CHECK(
        cudaMemcpy(want.data(), d_want.data(), d_want.size(), cudaMemcpyDeviceToHost));
    // The bf16 rule reads q, k and v rounded, as the convolution writes them; the oracle
    // and the TF32 variants read the fp32 values.
    std::vector<Bf16> qkv_bf16(qkv.size());
    for (size_t i = 0; i < qkv.size(); ++i) qkv_bf16[i] = float_to_bf16(qkv[i]);
    gpu::DeviceBuffer d_qkv_bf16 = gpu::DeviceBuffer::allocate(qkv_bf16.size() * 2);
    HSRING_CUDA_CHECK(
        cudaMemcpy(d_qkv_bf16.data(), qkv_bf16.data(), d_qkv_bf16.size(), cudaMemcpyHostToDevice));
    // 3xTF32 products keep fp32's accuracy; one TF32 product keeps 11 significant bits, a
    // bf16 operand 8.
    enum class Rule { kTf32x3, kTf32, kBf16 };
    for (const auto& [rule, bound] : {std::pair{Rule::kTf32x3, 1e-4}, std::pair{Rule::kTf32, 4e-3},
                                      std::pair{Rule::kBf16, 1e-2}}) {
      std::vector<std::vector<float>> runs;
      for (int run = 0; run < 2; ++run) {
        HSRING_CUDA_CHECK(cudaMemset(d_out.data(), 0xFF, d_out.size()));
        const auto* d_chunk_spans = d_chunks.as<DeltaSpan>();
        const auto* d_doc_spans = d_docs.as<DeltaSpan>();
        runs.emplace_back(size_t(t) * shape.v_dim());
        if (rule == Rule::kBf16) {  // out in bf16, as the gated norm reads it
          HSRING_CUDA_CHECK(launch_delta_rule(
              d_qkv_bf16.as<Bf16>(), d_g.as<float>(), d_beta.as<float>(), shape, t, d_chunk_spans,
              uint32_t(chunks.size()), d_doc_spans, uint32_t(docs.size()), scratch.as<float>(),
              d_out.as<Bf16>(), nullptr));
          std::vector<Bf16> out(runs.back().size());
          HSRING_CUDA_CHECK(
              cudaMemcpy(out.data(), d_out.data(), out.size() * 2, cudaMemcpyDeviceToHost));
          for (size_t i = 0; i < out.size(); ++i) runs.back()[i] = bf16_to_float(out[i]);
          continue;
        }
        HSRING_CUDA_CHECK(launch_delta_rule_tf32(
            d_qkv.as<float>(), d_g.as<float>(), d_beta.as<float>(), shape, t, d_chunk_spans,
            uint32_t(chunks.size()), d_doc_spans, uint32_t(docs.size()), scratch.as<float>(),
            d_out.as<float>(), nullptr,
            rule == Rule::kTf32 ? DeltaTf32Precision::kTf32 : DeltaTf32Precision::kTf32x3));
        HSRING_CUDA_CHECK(
            cudaMemcpy(runs.back().data(), d_out.data(), d_out.size(), cudaMemcpyDeviceToHost));
      }
      const double err = relative_error(runs[0], want);
      std::printf(
          "[   INFO   ] delta rule dk %u dv %u %s: chunked vs recurrent relative error %.3e\n",
          shape.qk_head_dim, shape.v_head_dim,
          rule == Rule::kTf32x3 ? "3xTF32"
          : rule == Rule::kTf32 ? "TF32"
                                : "bf16",
          err);
      EXPECT_LT(err, bound) << "dk " << shape.qk_head_dim;
      // Per document too: a boundary leak shows in the document after it.
      for (size_t d = 0; d + 1 < offsets.size(); ++d) {
        const size_t n = size_t(offsets[d + 1] - offsets[d]);
        EXPECT_LT(relative_error(rows(runs[0], shape.v_dim(), size_t(offsets[d]), n),
                                 rows(want, shape.v_dim(), size_t(offsets[d]), n)),
                  bound)
            << "document " << d;
      }
      EXPECT_EQ(runs[0], runs[1]);  // bit-identical repeats
    }
  }
}

TEST(CudaModelDeviceTest, SetupErrorsAreClear) {
  HSRING_REQUIRE_GPUS(1);
  // Far more than any GPU holds: a message with the model, the bytes and the GPU.
  ModelConfig huge = named_model_config("qwen3-8b");
  huge.num_layers = 1000;
  try {
    CudaTargetModel::with_random_weights(huge, 0, 0);
    FAIL() << "a 400 GB model was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), Errc::kCuda);
    EXPECT_EQ(gpu::cuda_code(e), cudaErrorMemoryAllocation);
    EXPECT_NE(what.find("model 'qwen3-8b' needs"), std::string::npos) << what;
    EXPECT_NE(what.find("GiB"), std::string::npos) << what;
    EXPECT_NE(what.find("GPU 0"), std::string::npos) << what;
  }
  ModelConfig odd = named_model_config("tiny");
  odd.head_dim = 48;
  try {
    CudaTargetModel::with_random_weights(odd, 0, 0);
    FAIL() << "head_dim 48 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kModelBadConfig);
    EXPECT_NE(std::string(e.what()).find("head_dim 48"), std::string::npos) << e.what();
  }
  EXPECT_THROW(open_cuda_model("tiny", 0, 4096), Error);
  EXPECT_THROW(open_cuda_model("no-such-shape"), Error);
}

}  // namespace
}  // namespace hsring
