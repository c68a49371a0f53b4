// forward_bench: the CUDA target forward (model/cuda_target_model.h) at production batch
// size, against cuBLAS's own bf16 GEMM rate measured in the same run:
//   1. forward_device over T tokens packed as documents of 256..4096 tokens (log-uniform),
//      capturing default_capture_layers(L, 5) as bf16 [T, 5 H] plus greedy labels; median
//      of N after warm-up, CUDA-event timing;
//   2. the model FLOPs of that batch: 2 x (matmul parameters) per token, plus causal
//      attention, 4 x head_dim x heads x (keys each query sees) per layer;
//   3. the attention kernel alone on the same documents, q/k/v finishing alone (each of its
//      kernels), and each GEMM shape of the forward alone, to show where the time goes;
//   4. one large bf16 GEMM through the same cuBLAS call the model uses, before and after;
//   5. for a hybrid (Qwen3.5) model: one DeltaNet layer's and one attention layer's time
//      inside the forward (forwards that stop after layer 0, 2 and 3), and the chunked
//      delta rule alone on the same documents, with its FLOP rate against cuBLAS's;
//   6. for a mixture of experts (qwen3-30b-a3b, qwen3.6-35b-a3b): FLOPs of the active
//      experts only, the routing and the grouped expert GEMMs alone on a random routing, and
//      the forward's rate against the grouped GEMMs' (forward_over_grouped_gemm).
// --num-layers cuts the preset to its first N layers; --docs-out writes the batch's
// document lengths, one a line, for a transformers forward of the same documents
// (bench/hybrid_forward_torch.py, bench/moe_forward_torch.py). Prints one `key=value` line per
// figure. Needs a GPU.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_stats.h"
#include "common/error.h"
#include "common/random.h"
#include "gpu/cuda_handles.h"
#include "gpu/device.h"
#include "gpu/ops/bf16_convert.h"
#include "model/cuda_blas.h"
#include "model/cuda_delta_net.h"
#include "model/cuda_kernels.h"
#include "model/cuda_moe.h"
#include "model/cuda_target_model.h"
#include "model/cuda_weights.h"
#include "model/decoder_layer.h"
#include "model/forward_flops.h"

namespace hsring {
namespace {

using bench::median;
using bench::print;

struct Options {
  std::string model = "qwen3-8b";
  uint32_t tokens = 16384;
  uint32_t min_doc = 256;
  uint32_t max_doc = 4096;
  uint32_t layers = 5;  // captured
  uint32_t iterations = 10;
  uint32_t warmup = 2;
  int gpu = 0;
  uint64_t seed = 0;
  uint32_t gemm_m = 16384, gemm_k = 4096, gemm_n = 12288;
  uint32_t num_layers = 0;  // 0: the preset's own count
  std::string docs_out;
  // The timed forwards alone, for a profiler (bench/forward_compare.sh): no cuBLAS yardstick,
  // no kernel timed on its own.
  bool forward_only = false;
};

// Median milliseconds of `fn` enqueued on `stream`, after `warmup` untimed runs.
template <class Fn>
double time_ms(cudaStream_t stream, uint32_t warmup, uint32_t iterations, Fn&& fn) {
  for (uint32_t i = 0; i < warmup; ++i) fn();
  HSRING_CUDA_CHECK(cudaStreamSynchronize(stream));
  gpu::Event start = gpu::make_event(), end = gpu::make_event();
  std::vector<double> ms;
  for (uint32_t i = 0; i < iterations; ++i) {
    HSRING_CUDA_CHECK(cudaEventRecord(start.get(), stream));
    fn();
    HSRING_CUDA_CHECK(cudaEventRecord(end.get(), stream));
    HSRING_CUDA_CHECK(cudaEventSynchronize(end.get()));
    ms.push_back(gpu::elapsed_ms(start.get(), end.get()));
  }
  return median(ms);
}

struct Batch {
  std::vector<int32_t> tokens, positions, offsets{0};
};

// Documents of log-uniform length in [min_doc, max_doc]; the last one takes what is left.
Batch make_batch(const Options& o, uint32_t vocab) {
  Batch b;
  uint64_t state = o.seed ^ 0xF0F0u;
  const double lo = std::log(double(o.min_doc)), hi = std::log(double(o.max_doc));
  while (b.tokens.size() < o.tokens) {
    const double u = double(splitmix64(state) >> 11) / double(1ull << 53);
    const auto want = uint32_t(std::exp(lo + u * (hi - lo)));
    const auto length = std::min<uint32_t>(want, o.tokens - uint32_t(b.tokens.size()));
    for (uint32_t i = 0; i < length; ++i) {
      b.tokens.push_back(int32_t(splitmix64(state) % vocab));
      b.positions.push_back(int32_t(i));
    }
    b.offsets.push_back(int32_t(b.tokens.size()));
  }
  return b;
}

// TFLOP/s of one large bf16 GEMM through the model's own cuBLAS call, median of 20.
double gemm_tflops(const Options& o, cudaStream_t stream) {
  Blas blas;
  blas.bind(stream);
  const uint64_t m = o.gemm_m, kk = o.gemm_k, n = o.gemm_n;
  gpu::DeviceBuffer x = gpu::DeviceBuffer::allocate(m * kk * 2);
  gpu::DeviceBuffer w = gpu::DeviceBuffer::allocate(n * kk * 2);
  gpu::DeviceBuffer y = gpu::DeviceBuffer::allocate(m * n * 2);
  // Non-zero, varied values (zeros run faster than real data).
  HSRING_CUDA_CHECK(launch_random_fill(x.as<Bf16>(), m * kk, 1, 1.0f, 0.0f, stream));
  HSRING_CUDA_CHECK(launch_random_fill(w.as<Bf16>(), n * kk, 2, 0.02f, 0.0f, stream));
  const double ms = time_ms(stream, 5, 20, [&] {
    blas.linear(x.as<Bf16>(), uint32_t(m), uint32_t(kk), w.as<Bf16>(), uint32_t(n), y.data(), false,
                n);
  });
  return 2.0 * double(m) * double(n) * double(kk) / (ms * 1e-3) / 1e12;
}

struct ExpertTiming {
  double routing_ms = 0;     // one layer: router softmax / top-k and the grouping
  double grouped_ms = 0;     // one layer: the gate/up and down grouped GEMMs
  double grouped_flops = 0;  // theirs, one layer
};

// A mixture layer's routing and grouped GEMMs alone (model/cuda_moe.h), on random data and
// a random routing (each token's top_k experts uniform without repeats, as random router
// weights give): its tokens' expert loads vary as a real batch's do.
ExpertTiming time_experts(const ModelConfig& c, uint32_t t, uint64_t seed, cudaStream_t stream) {
  const MoeShape& m = c.moe;
  const uint64_t h = c.hidden_size, ei = m.expert_intermediate, e = m.num_experts;
  const uint32_t k = m.experts_per_token;
  const uint64_t slots = uint64_t(t) * k;
  std::vector<ExpertChoice> choices(slots);
  uint64_t state = seed ^ 0xE0E0u;
  for (uint32_t r = 0; r < t; ++r)
    for (uint32_t j = 0; j < k; ++j) {
      uint32_t pick = 0;
      bool taken = true;
      while (taken) {
        pick = uint32_t(splitmix64(state) % e);
        taken = false;
        for (uint32_t i = 0; i < j; ++i) taken |= choices[r * k + i].expert == pick;
      }
      choices[r * k + j] = {pick, 1.0f / float(k)};
    }
  const uint32_t chunks = group_chunks(slots);
  const uint32_t tiles = max_expert_tiles(slots, uint32_t(e));
  gpu::DeviceBuffer choice_buffer = gpu::DeviceBuffer::allocate(slots * sizeof(ExpertChoice));
  gpu::DeviceBuffer logits = gpu::DeviceBuffer::allocate(uint64_t(t) * e * 4);
  gpu::DeviceBuffer ints = gpu::DeviceBuffer::allocate((uint64_t(chunks) * e + e + 1) * 4);
  gpu::DeviceBuffer rows = gpu::DeviceBuffer::allocate(2 * slots * 4);
  gpu::DeviceBuffer tile_buffer = gpu::DeviceBuffer::allocate(tiles * sizeof(ExpertTile));
  gpu::DeviceBuffer x = gpu::DeviceBuffer::allocate(uint64_t(t) * h * 2);
  gpu::DeviceBuffer gate_up = gpu::DeviceBuffer::allocate(slots * 2 * ei * 2);
  gpu::DeviceBuffer act = gpu::DeviceBuffer::allocate(slots * ei * 2);
  gpu::DeviceBuffer out = gpu::DeviceBuffer::allocate(slots * h * 4);
  gpu::DeviceBuffer w_up = gpu::DeviceBuffer::allocate(e * 2 * ei * h * 2);
  gpu::DeviceBuffer w_down = gpu::DeviceBuffer::allocate(e * h * ei * 2);
  HSRING_CUDA_CHECK(cudaMemcpy(choice_buffer.data(), choices.data(), slots * sizeof(ExpertChoice),
                               cudaMemcpyHostToDevice));
  HSRING_CUDA_CHECK(launch_random_fill(logits.as<float>(), uint64_t(t) * e, 8, 2.0f, 0.0f, stream));
  HSRING_CUDA_CHECK(launch_random_fill(x.as<Bf16>(), uint64_t(t) * h, 9, 1.0f, 0.0f, stream));
  HSRING_CUDA_CHECK(launch_random_fill(act.as<Bf16>(), slots * ei, 10, 1.0f, 0.0f, stream));
  HSRING_CUDA_CHECK(launch_random_fill(w_up.as<Bf16>(), e * 2 * ei * h, 11, 0.02f, 0.0f, stream));
  HSRING_CUDA_CHECK(launch_random_fill(w_down.as<Bf16>(), e * h * ei, 12, 0.02f, 0.0f, stream));
  auto* int_base = ints.as<int32_t>();
  const ExpertGroups groups{int_base, int_base + uint64_t(chunks) * e, rows.as<int32_t>(),
                            rows.as<int32_t>() + slots, tile_buffer.as<ExpertTile>()};
  gpu::DeviceBuffer routed = gpu::DeviceBuffer::allocate(slots * sizeof(ExpertChoice));
  ExpertTiming timing;
  // The routing of random logits (into a buffer of its own: the grouping below reads the
  // uniform choices), then the grouping; the logits are overwritten by each run alike.
  timing.routing_ms = time_ms(stream, 2, 10, [&] {
    HSRING_CUDA_CHECK(launch_route(logits.as<float>(), t, e, uint32_t(e), k, m.normalise_top_k,
                                   routed.as<ExpertChoice>(), stream));
    HSRING_CUDA_CHECK(launch_group_by_expert(choice_buffer.as<ExpertChoice>(), uint32_t(slots), k,
                                             uint32_t(e), groups, stream));
  });
  GroupedProduct up{x.as<Bf16>(), groups.row_token, h,     w_up.as<Bf16>(),
                    2 * ei * h,   gate_up.data(),   false, 2 * ei,
                    uint32_t(h),  uint32_t(2 * ei)};
  GroupedProduct down{act.as<Bf16>(), nullptr, ei, w_down.as<Bf16>(), h * ei,
                      out.data(),     true,    h,  uint32_t(ei),      uint32_t(h)};
  const double up_ms = time_ms(stream, 2, 10, [&] {
    HSRING_CUDA_CHECK(launch_grouped_linear(up, groups.tiles, tiles, stream));
  });
  const double down_ms = time_ms(stream, 2, 10, [&] {
    HSRING_CUDA_CHECK(launch_grouped_linear(down, groups.tiles, tiles, stream));
  });
  const double up_flops = 2.0 * double(slots) * double(h) * 2.0 * double(ei);
  const double down_flops = 2.0 * double(slots) * double(ei) * double(h);
  print("moe_routing_ms_per_layer", timing.routing_ms, "%.3f");
  print("grouped_gate_up_ms_per_layer", up_ms, "%.3f");
  print("grouped_gate_up_tflops", up_flops / (up_ms * 1e-3) / 1e12, "%.1f");
  print("grouped_down_ms_per_layer", down_ms, "%.3f");
  print("grouped_down_tflops", down_flops / (down_ms * 1e-3) / 1e12, "%.1f");
  timing.grouped_ms = up_ms + down_ms;
  timing.grouped_flops = up_flops + down_flops;
  return timing;
}

int run(const Options& o) {
  HSRING_CUDA_CHECK(cudaSetDevice(o.gpu));
  std::printf("gpu=%s\n", gpu::describe_gpu(o.gpu).c_str());
  int driver = 0, runtime = 0;
  (void)cudaDriverGetVersion(&driver);
  (void)cudaRuntimeGetVersion(&runtime);
  std::printf("cuda_driver=%d\ncuda_runtime=%d\n", driver, runtime);

  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<CudaTargetModel> model;
  if (o.num_layers) {
    ModelConfig cut = model_config_of(o.model);
    if (o.num_layers > cut.num_layers)
      throw Error(Errc::kUsage,
                  "--num-layers exceeds the model's " + std::to_string(cut.num_layers));
    cut.num_layers = o.num_layers;
    if (!cut.layer_kinds.empty()) cut.layer_kinds.resize(o.num_layers);
    if (!cut.mlp_kinds.empty()) cut.mlp_kinds.resize(o.num_layers);
    model = CudaTargetModel::with_random_weights(cut, o.seed, o.gpu);
  } else {
    model = open_cuda_model(o.model, o.seed, o.gpu);
  }
  HSRING_CUDA_CHECK(cudaDeviceSynchronize());
  const double init_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const ModelConfig& c = model->config();
  std::printf("model=%s\n", c.name.c_str());
  print("parameters", double(parameter_count(c)), "%.0f");
  print("weight_bytes", double(model->weight_bytes()), "%.0f");
  print("weights_init_s", init_s, "%.3f");

  const Batch batch = make_batch(o, c.vocab_size);
  const auto t = uint32_t(batch.tokens.size());
  const size_t docs = batch.offsets.size() - 1;
  uint32_t longest = 0;
  double keys_seen = 0;  // sum over queries of the keys each attends to
  for (size_t d = 0; d < docs; ++d) {
    const double n = batch.offsets[d + 1] - batch.offsets[d];
    longest = std::max(longest, uint32_t(n));
    keys_seen += n * (n + 1) / 2;
  }
  print("tokens", t, "%.0f");
  print("documents", double(docs), "%.0f");
  print("longest_document", longest, "%.0f");
  print("layers", c.num_layers, "%.0f");
  if (!o.docs_out.empty()) {
    std::FILE* f = std::fopen(o.docs_out.c_str(), "w");
    if (!f) throw std::runtime_error("cannot write " + o.docs_out);
    for (size_t d = 0; d < docs; ++d)
      std::fprintf(f, "%d\n", batch.offsets[d + 1] - batch.offsets[d]);
    std::fclose(f);
  }
  uint32_t attention_layers = 0, moe_layers = 0;
  for (uint32_t i = 0; i < c.num_layers; ++i) {
    attention_layers += c.kind(i) == LayerKind::kAttention;
    moe_layers += c.mlp_kind(i) == MlpKind::kExperts;
  }
  const uint32_t dense_mlp_layers = c.num_layers - moe_layers;
  const uint32_t delta_layers = c.num_layers - attention_layers;

  ForwardRequest request;
  request.capture_layers = capture_layers_for(c, o.layers);
  const uint64_t h = c.hidden_size;
  const uint64_t k = request.capture_layers.size();
  gpu::DeviceBuffer captured = gpu::DeviceBuffer::allocate(uint64_t(t) * k * h * 2);
  gpu::DeviceBuffer greedy = gpu::DeviceBuffer::allocate(uint64_t(t) * 4);
  DeviceCapture capture{DType::kBF16, {}, greedy.as<int32_t>(), nullptr};
  for (uint64_t i = 0; i < k; ++i)  // concatenated [T, K*H], as the ring's default layout
    capture.layers.push_back({captured.data() + i * h * 2, k * h * 2});
  model->reserve(t);
  size_t free = 0, total = 0;
  HSRING_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  print("gpu_memory_used_bytes", double(total - free), "%.0f");

  gpu::Stream stream = gpu::make_stream();
  std::printf("cublas_gemm_shape=%ux%ux%u\n", o.gemm_m, o.gemm_k, o.gemm_n);
  const double gemm_before = o.forward_only ? 0.0 : gemm_tflops(o, stream.get());
  const PackedBatch view{batch.tokens, batch.positions, batch.offsets};
  const double forward_ms = time_ms(stream.get(), o.warmup, o.iterations, [&] {
    model->forward_device(view, request, stream.get(), capture);
  });

  // FLOPs as model/forward_flops.h counts them.
  const DeltaNetShape& dn = c.delta_net;
  const double matmul_params = matmul_parameters(c);
  const double attention_flops_layer = attention_layer_flops(c, keys_seen);
  const double delta_flops_layer = delta_rule_layer_flops(c.delta_net, t);
  const double flops = forward_flops(c, t, keys_seen);
  print("forward_ms", forward_ms, "%.2f");
  print("forward_tokens_per_s", t / (forward_ms * 1e-3), "%.0f");
  print("model_flops_per_token", flops / t, "%.4g");
  print("model_matmul_flops_per_token", 2.0 * matmul_params, "%.4g");
  print("model_attention_flops_per_token", attention_flops_layer * attention_layers / t, "%.4g");
  if (delta_layers)
    print("model_delta_rule_flops_per_token", delta_flops_layer * delta_layers / t, "%.4g");
  const double forward_tflops = flops / (forward_ms * 1e-3) / 1e12;
  print("forward_tflops", forward_tflops, "%.1f");
  if (o.forward_only) return 0;

  // Attention alone on the same documents (values do not change its speed): as the model
  // runs it (the heads of a KV group packed into one block, launch_attention's best kernel
  // here), then each kernel and one head a block. Longer warm-up: the first kernel timed
  // after the forwards ran slower in early runs, whichever it was.
  double attention_ms = 0;
  {
    const uint64_t qd = c.q_dim(), kvd = c.kv_dim();
    gpu::DeviceBuffer q = gpu::DeviceBuffer::allocate(uint64_t(t) * qd * 2);
    gpu::DeviceBuffer kv = gpu::DeviceBuffer::allocate(uint64_t(t) * kvd * 2 * 2);
    gpu::DeviceBuffer out = gpu::DeviceBuffer::allocate(uint64_t(t) * qd * 2);
    HSRING_CUDA_CHECK(cudaMemset(q.data(), 0x3c, q.size()));
    HSRING_CUDA_CHECK(cudaMemset(kv.data(), 0x3b, kv.size()));
    auto* kp = kv.as<Bf16>();
    const uint32_t max_pack = max_attention_pack(c.num_heads, c.num_kv_heads);
    struct Variant {
      const char* name;
      uint32_t pack;
      AttentionKernel kernel;
    };
    const Variant variants[] = {{"attention", max_pack, AttentionKernel::kBest},
                                {"attention_mma_sync_32", max_pack, AttentionKernel::kMmaSync32},
                                {"attention_mma_sync_64", max_pack, AttentionKernel::kMmaSync64},
                                {"attention_wgmma", max_pack, AttentionKernel::kWgmma},
                                {"attention_one_head_per_block", 1, AttentionKernel::kBest}};
    double mma_sync_ms = 0;
    for (const Variant& variant : variants) {
      if (!attention_kernel_runs(variant.kernel, c.head_dim)) continue;
      if (max_pack == 1 && variant.pack == 1) continue;  // the first
      const std::vector<AttentionTile> tiles =
          attention_tiles(batch.offsets.data(), batch.offsets.size(), variant.pack);
      gpu::DeviceBuffer tile_buffer =
          gpu::DeviceBuffer::allocate(tiles.size() * sizeof(AttentionTile));
      HSRING_CUDA_CHECK(
          cudaMemcpy(tile_buffer.data(), tiles.data(), tile_buffer.size(), cudaMemcpyHostToDevice));
      const double ms = time_ms(stream.get(), 10, 10, [&] {
        HSRING_CUDA_CHECK(launch_attention(q.as<Bf16>(), kp, kp + uint64_t(t) * kvd,
                                           tile_buffer.as<AttentionTile>(), uint32_t(tiles.size()),
                                           c.num_heads, c.num_kv_heads, c.head_dim, variant.pack,
                                           out.as<Bf16>(), stream.get(), variant.kernel));
      });
      const std::string prefix = variant.name;
      print((prefix + "_heads_per_block").c_str(), variant.pack, "%.0f");
      print((prefix + "_ms_per_layer").c_str(), ms, "%.3f");
      print((prefix + "_tflops").c_str(), attention_flops_layer / (ms * 1e-3) / 1e12, "%.1f");
      if (&variant == &variants[0]) {
        attention_ms = ms * attention_layers;
        print("attention_share_of_forward", attention_ms / forward_ms, "%.3f");
      }
      if (variant.kernel == AttentionKernel::kMmaSync32) mma_sync_ms = ms;
      if (variant.kernel == AttentionKernel::kWgmma)
        print("attention_wgmma_speed_over_mma_sync_32", mma_sync_ms / ms, "%.3f");
    }
  }

  // q/k/v finishing alone, each kernel that runs at this shape, on the same row count with
  // QK-norm weights when the model has them (values do not change its speed).
  {
    const DecoderLayerShape layer = decoder_layer_shape(c);
    const uint64_t qkv_width = (layer.attention_gate ? 2 : 1) * layer.q_dim() + 2 * layer.kv_dim();
    const uint64_t half = c.rope_dim() / 2;
    gpu::DeviceBuffer qkv = gpu::DeviceBuffer::allocate(uint64_t(t) * qkv_width * 2);
    gpu::DeviceBuffer out = gpu::DeviceBuffer::allocate(uint64_t(t) * qkv_width * 2);
    gpu::DeviceBuffer angles = gpu::DeviceBuffer::allocate(uint64_t(t) * half * 4 * 2);
    gpu::DeviceBuffer norms = gpu::DeviceBuffer::allocate(layer.head_dim * 4 * 2);
    HSRING_CUDA_CHECK(cudaMemset(qkv.data(), 0x3c, qkv.size()));
    HSRING_CUDA_CHECK(cudaMemset(angles.data(), 0x3e, angles.size()));
    HSRING_CUDA_CHECK(cudaMemset(norms.data(), 0x3f, norms.size()));
    const float* norm = c.qk_norm ? norms.as<float>() : nullptr;
    auto* q = out.as<Bf16>();
    Bf16* k = q + uint64_t(t) * layer.q_dim();
    Bf16* v = k + uint64_t(t) * layer.kv_dim();
    double staged_ms = 0;
    struct Variant {
      const char* name;
      QkvFinishKernel kernel;
    };
    for (const Variant variant : {Variant{"qkv_finish", QkvFinishKernel::kBest},
                                  Variant{"qkv_finish_staged", QkvFinishKernel::kStaged},
                                  Variant{"qkv_finish_in_lane", QkvFinishKernel::kInLane}}) {
      const QkvFinishKernel kernel = variant.kernel;  // captured by the timed lambda
      if (!qkv_finish_kernel_runs(kernel, layer)) continue;
      const double ms = time_ms(stream.get(), 10, 10, [&] {
        HSRING_CUDA_CHECK(launch_qkv_finish(
            qkv.as<Bf16>(), t, layer, nullptr, norm, norm ? norm + layer.head_dim : nullptr,
            angles.as<float>(), angles.as<float>() + t * half, q, k, v, stream.get(), kernel));
      });
      print((std::string(variant.name) + "_ms_per_layer").c_str(), ms, "%.3f");
      if (kernel == QkvFinishKernel::kStaged) staged_ms = ms;
      if (kernel == QkvFinishKernel::kInLane)
        print("qkv_finish_in_lane_speed_over_staged", staged_ms / ms, "%.3f");
    }
  }

  // Hybrid models: layer times inside the forward, from forwards that stop early (no head):
  // layers 0..0, 0..2 (three DeltaNet layers) and 0..3 (and the first attention layer).
  double delta_rule_ms = 0;
  if (delta_layers && c.num_layers >= 4 && c.kind(0) == LayerKind::kDeltaNet &&
      c.kind(2) == LayerKind::kDeltaNet && c.kind(3) == LayerKind::kAttention) {
    double until[4] = {};
    for (int32_t last : {0, 2, 3}) {
      ForwardRequest partial;
      partial.capture_layers = {last};
      partial.greedy = false;
      DeviceCapture one{DType::kBF16, {{captured.data(), h * 2}}, nullptr, nullptr};
      until[last] = time_ms(stream.get(), 1, 5,
                            [&] { model->forward_device(view, partial, stream.get(), one); });
    }
    const double delta_layer_ms = (until[2] - until[0]) / 2;
    const double attention_layer_ms = until[3] - until[2];
    print("delta_net_layer_ms", delta_layer_ms, "%.2f");
    print("attention_layer_ms", attention_layer_ms, "%.2f");
    print("delta_net_layers_share_of_forward", delta_layer_ms * delta_layers / forward_ms, "%.3f");
    print("attention_layers_share_of_forward", attention_layer_ms * attention_layers / forward_ms,
          "%.3f");

    // The chunked delta rule alone (both passes) on the same documents, random inputs.
    const std::vector<DeltaSpan> chunks = delta_chunks(batch.offsets.data(), batch.offsets.size());
    const std::vector<DeltaSpan> documents =
        delta_documents(batch.offsets.data(), batch.offsets.size());
    gpu::DeviceBuffer spans =
        gpu::DeviceBuffer::allocate((chunks.size() + documents.size()) * sizeof(chunks[0]));
    HSRING_CUDA_CHECK(cudaMemcpy(spans.data(), chunks.data(), chunks.size() * sizeof(chunks[0]),
                                 cudaMemcpyHostToDevice));
    HSRING_CUDA_CHECK(cudaMemcpy(spans.data() + chunks.size() * sizeof(chunks[0]), documents.data(),
                                 documents.size() * sizeof(documents[0]), cudaMemcpyHostToDevice));
    gpu::DeviceBuffer qkv = gpu::DeviceBuffer::allocate(uint64_t(t) * dn.conv_dim() * 4);
    gpu::DeviceBuffer qkv_bf16 = gpu::DeviceBuffer::allocate(uint64_t(t) * dn.conv_dim() * 2);
    gpu::DeviceBuffer gates = gpu::DeviceBuffer::allocate(uint64_t(t) * dn.v_heads * 2 * 4);
    gpu::DeviceBuffer scratch = gpu::DeviceBuffer::allocate(delta_scratch_floats(t, dn) * 4);
    gpu::DeviceBuffer out = gpu::DeviceBuffer::allocate(uint64_t(t) * dn.v_dim() * 4);
    // Unit-scale q and k rows (as the L2 norm leaves them), mild decays, beta near 0.5; the
    // bf16 rule reads them rounded, as the convolution writes them.
    const float qk_scale = std::sqrt(3.0f / float(dn.qk_head_dim));
    HSRING_CUDA_CHECK(launch_random_fill(qkv.as<float>(), uint64_t(t) * dn.conv_dim(), 5, qk_scale,
                                         0.0f, stream.get()));
    HSRING_CUDA_CHECK(gpu::launch_float_to_bf16(qkv.as<float>(), uint64_t(t) * dn.conv_dim(),
                                                qkv_bf16.as<Bf16>(), stream.get()));
    auto* g = gates.as<float>();
    auto* beta = g + uint64_t(t) * dn.v_heads;
    HSRING_CUDA_CHECK(
        launch_random_fill(g, uint64_t(t) * dn.v_heads, 6, 0.05f, -0.05f, stream.get()));
    HSRING_CUDA_CHECK(
        launch_random_fill(beta, uint64_t(t) * dn.v_heads, 7, 0.4f, 0.5f, stream.get()));
    const auto* span_base = spans.as<DeltaSpan>();
    const auto* doc_base = span_base + chunks.size();
    const auto chunk_count = uint32_t(chunks.size()), doc_count = uint32_t(documents.size());
    const auto time_rule = [&] {
      return time_ms(stream.get(), 3, 10, [&] {
        HSRING_CUDA_CHECK(launch_delta_rule(qkv_bf16.as<Bf16>(), g, beta, dn, uint32_t(t),
                                            span_base, chunk_count, doc_base, doc_count,
                                            scratch.as<float>(), out.as<Bf16>(), stream.get()));
      });
    };
    const auto time_tf32_rule = [&](DeltaTf32Precision precision) {
      return time_ms(stream.get(), 3, 10, [&] {
        HSRING_CUDA_CHECK(launch_delta_rule_tf32(
            qkv.as<float>(), g, beta, dn, uint32_t(t), span_base, chunk_count, doc_base, doc_count,
            scratch.as<float>(), out.as<float>(), stream.get(), precision));
      });
    };
    const double ms = time_rule();
    delta_rule_ms = ms * delta_layers;
    print("delta_rule_ms_per_layer", ms, "%.3f");
    print("delta_rule_tflops", delta_flops_layer / (ms * 1e-3) / 1e12, "%.2f");
    print("delta_rule_share_of_forward", delta_rule_ms / forward_ms, "%.3f");
    // Again, then the TF32 variants (launch_delta_rule_tf32) on the same values in fp32.
    print("delta_rule_bf16_ms_per_layer", time_rule(), "%.3f");
    print("delta_rule_tf32_ms_per_layer", time_tf32_rule(DeltaTf32Precision::kTf32), "%.3f");
    print("delta_rule_3xtf32_ms_per_layer", time_tf32_rule(DeltaTf32Precision::kTf32x3), "%.3f");
  }

  // The forward's GEMMs alone, each through the model's cuBLAS call on random data: where
  // the time goes. The rest (norms, RoPE, SwiGLU, captures, argmax) is what remains.
  // Mixtures add the grouped GEMMs and the routing alone (time_experts).
  double grouped_tflops = 0, routing_ms = 0;
  {
    Blas blas;
    blas.bind(stream.get());
    const uint64_t q_rows = c.attention_gate ? 2ull * c.q_dim() : c.q_dim();
    const uint64_t qkv = q_rows + 2ull * c.kv_dim(), inter = c.intermediate_size;
    const uint64_t si = c.moe.shared_intermediate;
    const uint64_t delta_in = uint64_t(dn.conv_dim()) + dn.v_dim() + 2ull * dn.v_heads;
    const uint64_t v = c.vocab_size;
    const uint64_t head_rows = std::max<uint64_t>(64, (1ull << 30) / (v * 4) / 64 * 64);
    struct Product {
      const char* name;
      uint64_t rows, in, out;
      bool fp32;
      float beta;
      uint64_t repeats;  // per forward
    };
    const Product products[] = {
        {"qkv", t, h, qkv, true, 0.0f, attention_layers},
        {"o_proj", t, c.q_dim(), h, true, 1.0f, attention_layers},
        {"delta_in_proj", t, h, delta_in, true, 0.0f, delta_layers},
        {"delta_out_proj", t, dn.v_dim(), h, true, 1.0f, delta_layers},
        {"gate_up", t, h, 2 * inter, false, 0.0f, dense_mlp_layers},
        {"down", t, inter, h, true, 1.0f, dense_mlp_layers},
        // Mixtures: the router (hi and lo halves of its input), the shared expert.
        {"router", t, h, moe_layers ? router_rows(c) : 0, true, 0.0f, 2ull * moe_layers},
        {"shared_gate_up", t, h, 2 * si, false, 0.0f, si ? moe_layers : 0},
        {"shared_down", t, si, h, true, 0.0f, si ? moe_layers : 0},
        {"lm_head", std::min<uint64_t>(head_rows, t), h, v, true, 0.0f,
         (t + head_rows - 1) / head_rows},
    };
    uint64_t x_bytes = 0, w_bytes = 0, y_bytes = 0;
    for (const Product& p : products) {
      if (p.repeats == 0) continue;
      x_bytes = std::max(x_bytes, p.rows * p.in * 2);
      w_bytes = std::max(w_bytes, p.out * p.in * 2);
      y_bytes = std::max(y_bytes, p.rows * p.out * 4);
    }
    gpu::DeviceBuffer x = gpu::DeviceBuffer::allocate(x_bytes);
    gpu::DeviceBuffer w = gpu::DeviceBuffer::allocate(w_bytes);
    gpu::DeviceBuffer y = gpu::DeviceBuffer::allocate(y_bytes);
    HSRING_CUDA_CHECK(cudaMemset(y.data(), 0, y.size()));
    HSRING_CUDA_CHECK(launch_random_fill(x.as<Bf16>(), x_bytes / 2, 3, 1.0f, 0.0f, stream.get()));
    HSRING_CUDA_CHECK(launch_random_fill(w.as<Bf16>(), w_bytes / 2, 4, 0.02f, 0.0f, stream.get()));
    double gemm_ms = 0;
    double gemm_flops = 0;
    for (const Product& p : products) {
      if (p.repeats == 0) continue;
      const double ms = time_ms(stream.get(), 2, 5, [&] {
        blas.linear(x.as<Bf16>(), uint32_t(p.rows), uint32_t(p.in), w.as<Bf16>(), uint32_t(p.out),
                    y.data(), p.fp32, p.out, p.beta);
      });
      const std::string key = std::string("gemm_") + p.name;
      print((key + "_ms").c_str(), ms, "%.3f");
      print((key + "_tflops").c_str(), 2.0 * p.rows * p.in * p.out / (ms * 1e-3) / 1e12, "%.1f");
      gemm_ms += ms * double(p.repeats);
      gemm_flops += 2.0 * p.rows * p.in * p.out * double(p.repeats);
    }
    if (moe_layers) {
      const ExpertTiming e = time_experts(c, t, o.seed, stream.get());
      gemm_ms += e.grouped_ms * moe_layers;
      gemm_flops += e.grouped_flops * moe_layers;
      grouped_tflops = e.grouped_flops / (e.grouped_ms * 1e-3) / 1e12;
      routing_ms = e.routing_ms * moe_layers;
      print("routing_share_of_forward", routing_ms / forward_ms, "%.3f");
      print("grouped_gemm_share_of_forward", e.grouped_ms * moe_layers / forward_ms, "%.3f");
    }
    print("gemm_ms_per_forward", gemm_ms, "%.1f");
    print("gemm_tflops_in_forward_shapes", gemm_flops / (gemm_ms * 1e-3) / 1e12, "%.1f");
    print("other_ms_per_forward", forward_ms - gemm_ms - attention_ms - delta_rule_ms - routing_ms,
          "%.1f");
  }

  // cuBLAS clocks vary from one measurement to the next (power and thermal state): the
  // ratio is taken against the best of the GEMM rates measured before and after.
  const double gemm_after = gemm_tflops(o, stream.get());
  print("cublas_gemm_tflops_before", gemm_before, "%.1f");
  print("cublas_gemm_tflops_after", gemm_after, "%.1f");
  const double gemm_best = std::max(gemm_before, gemm_after);
  print("cublas_gemm_tflops", gemm_best, "%.1f");
  print("forward_over_cublas", forward_tflops / gemm_best, "%.3f");
  if (grouped_tflops > 0) {
    // Active-expert FLOPs (forward_flops) against the grouped GEMM's own rate on this
    // routing and shape: what the rest of the layer costs on top of the experts.
    print("grouped_gemm_tflops", grouped_tflops, "%.1f");
    print("forward_over_grouped_gemm", forward_tflops / grouped_tflops, "%.3f");
    print("grouped_gemm_over_cublas", grouped_tflops / gemm_best, "%.3f");
  }
  if (delta_rule_ms > 0)
    print("delta_rule_over_cublas",
          delta_flops_layer * delta_layers / (delta_rule_ms * 1e-3) / 1e12 / gemm_best, "%.3f");
  return 0;
}

}  // namespace
}  // namespace hsring

int main(int argc, char** argv) {
  hsring::Options o;
  CLI::App app{"CUDA target forward throughput against cuBLAS's bf16 GEMM rate"};
  app.add_option("--model", o.model,
                 "Preset (qwen3-8b, qwen3-dense-27b, qwen3.6-27b, qwen3-30b-a3b, qwen3.6-35b-a3b, "
                 "tiny) or HF folder");
  app.add_option("--num-layers", o.num_layers, "Only the model's first N layers (0: all)");
  app.add_option("--docs-out", o.docs_out, "Write the document lengths here, one a line");
  app.add_option("--tokens", o.tokens, "Tokens per batch")->check(CLI::Range(1u, 1u << 20));
  app.add_option("--min-doc", o.min_doc, "Shortest document")->check(CLI::Range(1u, 1u << 20));
  app.add_option("--max-doc", o.max_doc, "Longest document")->check(CLI::Range(1u, 1u << 20));
  app.add_option("--layers", o.layers, "Captured layers K");
  app.add_option("--iterations", o.iterations, "Timed forwards (median)")
      ->check(CLI::Range(1u, 1000u));
  app.add_option("--warmup", o.warmup, "Untimed forwards first");
  app.add_option("--gpu", o.gpu, "GPU index");
  app.add_option("--seed", o.seed, "Weights and batch seed");
  app.add_flag("--forward-only", o.forward_only,
               "Time the forwards and stop: no cuBLAS yardstick, no kernel alone (for ncu)");
  CLI11_PARSE(app, argc, argv);
  if (o.min_doc > o.max_doc) {
    std::fprintf(stderr, "forward_bench: --min-doc exceeds --max-doc\n");
    return 2;
  }
  try {
    return hsring::run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "forward_bench: error: %s\n", e.what());
    return 1;
  }
}
