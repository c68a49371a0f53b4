// drafter_step_bench: one CUDA drafter training step at production batch size, against
// cuBLAS's GEMM rate measured in the same run. --objective dflash (the default) times the
// DFlash step (train/cuda_dflash_trainer.h): --draft-layers decoder layers of the target's
// shape over B 16 blocks at --anchors anchors, the target's frozen embedding and LM head
// (untied, random), with model FLOPs 4 x fc parameters per token (forward and weight
// gradient: the features are frozen), 6 x layer parameters per block row (the last
// layer's o_proj and MLP per scored row) plus 6 x k/v parameters per context row, 4 x head
// parameters per scored row (the head is frozen),
// and the block attention at 4 + 14 x head_dim per (query head, key) pair and layer. --batch-out
// writes the batch's documents and anchors for bench/dflash_step_torch.py. --phases adds one
// more step timed by cudaEvents between its phases (CudaDflashTrainer::set_phase_timing),
// printed as phase_ms:<phase>=<ms>, summed over the layers; --profile one more step between
// cudaProfilerStart and cudaProfilerStop, the one bench/ncu_dflash_step.sh profiles.
// --objective same-position times train/cuda_same_position_trainer.h:
//   1. the default drafter of --model fed by 5 captured layers (qwen3-8b: K 5 x H 4096 ->
//      D 4096, vocab 151936), T tokens packed as documents of 256..4096 tokens, features
//      bf16 on the device as a slot's DMA leaves them; compute_gradients_bf16 +
//      apply_gradients, median wall time of N after warm-up (a step synchronises);
//   2. the step's model FLOPs: 6 x (linear parameters) per token (forward 2, backward 4),
//      plus attention, 4 x head_dim per (query head, key) forward and 14 backward (scores
//      and d(probabilities) recomputed on both sides, dq, dk, dv);
//   3. one large GEMM through the trainer's own cuBLAS call (fp32 arrays, bf16 tensor-core
//      compute), the ceiling the step's products can reach.
// Prints one `key=value` line per figure. Needs a GPU.
#include <cuda_profiler_api.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "bench/bench_stats.h"
#include "common/random.h"
#include "gpu/cuda_handles.h"
#include "gpu/device.h"
#include "model/target_model.h"
#include "train/cuda_dflash_trainer.h"
#include "train/cuda_gemm.h"
#include "train/cuda_same_position_trainer.h"
#include "train/dflash_blocks.h"
#include "train/dflash_flops.h"

namespace hsring {
namespace {

using bench::median;
using bench::print;

struct Options {
  std::string objective = "dflash";
  std::string batch_out;  // dflash: the batch's documents and anchors, for the torch baseline
  uint32_t draft_layers = 5, block_size = 16, anchors = 512;
  std::string model = "qwen3-8b";
  uint32_t tokens = 16384;
  uint32_t layers = 5;  // captured
  uint32_t window = 256;
  uint32_t iterations = 5;
  uint32_t warmup = 2;
  int gpu = 0;
  uint32_t gemm_m = 16384, gemm_k = 4096, gemm_n = 12288;
  bool phases = false;   // dflash: one more step with per-phase device times
  bool profile = false;  // dflash: one more step between cudaProfilerStart and Stop
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct Batch {
  std::vector<int32_t> tokens, positions, offsets{0}, labels;
};

// Documents of log-uniform length in [256, 4096]; the last one takes what is left.
Batch make_batch(uint32_t tokens, uint32_t vocab) {
  Batch b;
  uint64_t state = 0xF0F0u;
  const double lo = std::log(256.0), hi = std::log(4096.0);
  while (b.tokens.size() < tokens) {
    const double u = double(splitmix64(state) >> 11) / double(1ull << 53);
    const auto length = std::min<uint32_t>(uint32_t(std::exp(lo + u * (hi - lo))),
                                           tokens - uint32_t(b.tokens.size()));
    for (uint32_t i = 0; i < length; ++i) {
      b.tokens.push_back(int32_t(splitmix64(state) % vocab));
      b.positions.push_back(int32_t(i));
      b.labels.push_back(int32_t(splitmix64(state) % vocab));
    }
    b.offsets.push_back(int32_t(b.tokens.size()));
  }
  return b;
}

// TFLOP/s of one large product through the trainer's GEMM call, median of 20.
double gemm_tflops(const Options& o) {
  gpu::Stream stream = gpu::make_stream();
  train::Gemm gemm(train::GemmPrecision::kBf16);
  gemm.bind(stream.get());
  const uint64_t m = o.gemm_m, k = o.gemm_k, n = o.gemm_n;
  std::vector<float> host(std::max(m, n) * k);
  uint64_t state = 7;
  for (float& v : host) v = float(int64_t(splitmix64(state) % 2001) - 1000) * 1e-3f;
  gpu::DeviceBuffer x = gpu::DeviceBuffer::allocate(m * k * 4);
  gpu::DeviceBuffer w = gpu::DeviceBuffer::allocate(n * k * 4);
  gpu::DeviceBuffer y = gpu::DeviceBuffer::allocate(m * n * 4);
  HSRING_CUDA_CHECK(cudaMemcpy(x.data(), host.data(), x.size(), cudaMemcpyHostToDevice));
  HSRING_CUDA_CHECK(cudaMemcpy(w.data(), host.data(), w.size(), cudaMemcpyHostToDevice));
  const auto product = [&] { gemm.forward(x.as<float>(), m, k, w.as<float>(), n, y.as<float>()); };
  for (int i = 0; i < 5; ++i) product();
  gpu::Event start = gpu::make_event(), end = gpu::make_event();
  std::vector<double> ms;
  for (int i = 0; i < 20; ++i) {
    HSRING_CUDA_CHECK(cudaEventRecord(start.get(), stream.get()));
    product();
    HSRING_CUDA_CHECK(cudaEventRecord(end.get(), stream.get()));
    HSRING_CUDA_CHECK(cudaEventSynchronize(end.get()));
    ms.push_back(gpu::elapsed_ms(start.get(), end.get()));
  }
  return 2.0 * double(m) * double(n) * double(k) / (median(ms) * 1e-3) / 1e12;
}

// Features as a slot's DMA leaves them: bf16 of magnitude 2^-7 .. 2^-5, either sign.
gpu::DeviceBuffer device_features(uint64_t values) {
  std::vector<uint16_t> features(values);
  uint64_t state = 11;
  for (uint16_t& f : features) {
    const uint64_t r = splitmix64(state);
    f = uint16_t(0x3c00u + r % 0x200u) | uint16_t((r >> 20) & 0x8000u);
  }
  gpu::DeviceBuffer device = gpu::DeviceBuffer::allocate(features.size() * 2);
  HSRING_CUDA_CHECK(
      cudaMemcpy(device.data(), features.data(), device.size(), cudaMemcpyHostToDevice));
  return device;
}

// Values uniform in +-scale, cheap to make by the billion.
std::vector<float> cheap_uniform(size_t n, uint64_t seed, float scale) {
  std::vector<float> out(n);
  uint64_t state = mix64(seed);
  for (float& v : out) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    v = scale * (float(int32_t(state >> 32)) * (1.0f / 2147483648.0f));
  }
  return out;
}

int run_dflash(const Options& o) {
  const ModelConfig target = model_config_of(o.model);
  train::DflashTrainerOptions options;
  options.model = train::default_dflash_config(target, o.layers, o.draft_layers);
  options.model.block_size = o.block_size;
  options.model.loss_gamma = train::default_loss_gamma(o.block_size);
  options.optimizer.schedule = {1e-4, 1e-5, 10, 1000};
  options.anchors = o.anchors;
  options.labels = train::DflashLabels::kTarget;  // the batch's labels: every row counts
  const train::DflashConfig& c = options.model;
  std::printf("drafter=%s\n", train::describe(c).c_str());
  const size_t vd = size_t(c.vocab_size) * c.width();
  options.embed = cheap_uniform(vd, 1, 0.02f);
  options.lm_head = cheap_uniform(vd, 2, 0.02f);

  const auto t0 = std::chrono::steady_clock::now();
  train::CudaDflashTrainer trainer(options);
  print("trainer_init_s", seconds_since(t0), "%.2f");
  options.embed = {};
  options.lm_head = {};
  print("parameters", double(trainer.layout().total), "%.0f");

  const Batch batch = make_batch(o.tokens, c.vocab_size);
  const auto t = uint32_t(batch.tokens.size());
  print("tokens", t, "%.0f");
  print("documents", double(batch.offsets.size() - 1), "%.0f");
  gpu::DeviceBuffer device = device_features(uint64_t(t) * c.feature_dim());
  const std::vector<float> no_features;
  const train::DrafterBatch view{no_features, batch.tokens, batch.positions, batch.offsets,
                                 batch.labels};

  std::vector<double> step_ms, gpu_ms;
  // The device's span of each step, from an event before its first launch to one after its
  // last: where it falls short of the wall time, the GPU waited for the host.
  const gpu::Event step_start = gpu::make_event(), step_end = gpu::make_event();
  double loss = 0, pairs = 0, blocks = 0;
  for (uint32_t i = 0; i < o.warmup + o.iterations; ++i) {
    // This step's anchors, as the trainer draws them: the attention's (query, key) pairs.
    const std::vector<int32_t> anchors = train::dflash_step_anchors(
        view, batch.labels, c, o.anchors, options.seed, trainer.optimizer_step());
    if (i == 0 && !o.batch_out.empty()) {
      std::ofstream out(o.batch_out);
      out << "doc_offsets";
      for (int32_t v : batch.offsets) out << ' ' << v;
      out << "\nanchors";
      for (int32_t v : anchors) out << ' ' << v;
      out << '\n';
    }
    const auto start = std::chrono::steady_clock::now();
    HSRING_CUDA_CHECK(cudaEventRecord(step_start.get(), trainer.stream()));
    loss = trainer.compute_gradients_bf16(device.as<uint16_t>(), view).loss;
    trainer.apply_gradients();
    HSRING_CUDA_CHECK(cudaEventRecord(step_end.get(), trainer.stream()));
    HSRING_CUDA_CHECK(cudaStreamSynchronize(trainer.stream()));
    if (i < o.warmup) continue;
    step_ms.push_back(seconds_since(start) * 1e3);
    gpu_ms.push_back(gpu::elapsed_ms(step_start.get(), step_end.get()));
    for (int32_t a : anchors) {
      const auto doc = std::upper_bound(batch.offsets.begin(), batch.offsets.end(), a) - 1;
      pairs += double(a - *doc + int32_t(c.block_size)) * c.block_size / o.iterations;
    }
    blocks += double(anchors.size()) / o.iterations;
  }
  size_t free = 0, total = 0;
  HSRING_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  print("gpu_memory_used_bytes", double(total - free), "%.0f");
  print("loss", loss, "%.3f");
  print("blocks", blocks, "%.0f");

  const double flops = train::dflash_step_flops(c, t, blocks, pairs);
  const double ms = median(step_ms);
  print("step_ms", ms, "%.1f");
  std::printf("step_ms_each=");  // the spread behind the median, in step order
  for (size_t i = 0; i < step_ms.size(); ++i) std::printf("%s%.1f", i ? "," : "", step_ms[i]);
  std::printf("\nstep_gpu_ms_each=");
  for (size_t i = 0; i < gpu_ms.size(); ++i) std::printf("%s%.1f", i ? "," : "", gpu_ms[i]);
  std::printf("\n");
  print("step_tokens_per_s", t / (ms * 1e-3), "%.0f");
  print("step_flops", flops, "%.4g");
  const double step_tflops = flops / (ms * 1e-3) / 1e12;
  print("step_tflops", step_tflops, "%.1f");
  std::printf("cublas_gemm_shape=%ux%ux%u\n", o.gemm_m, o.gemm_k, o.gemm_n);
  const double gemm = gemm_tflops(o);
  print("gemm_tflops", gemm, "%.1f");
  print("step_over_gemm", step_tflops / gemm, "%.3f");
  if (o.phases) {
    // A separate step: the events between phases would otherwise be in the timed ones.
    trainer.set_phase_timing(true);
    const auto start = std::chrono::steady_clock::now();
    (void)trainer.compute_gradients_bf16(device.as<uint16_t>(), view);
    trainer.apply_gradients();
    HSRING_CUDA_CHECK(cudaStreamSynchronize(trainer.stream()));
    print("phase_step_wall_ms", seconds_since(start) * 1e3, "%.1f");
    double sum = 0;
    for (const auto& [phase, ms] : trainer.phase_ms()) {
      std::printf("phase_ms:%s=%.2f\n", phase.c_str(), ms);
      sum += ms;
    }
    print("phase_ms_total", sum, "%.1f");
  }
  if (o.profile) {
    // Only this step's kernels for `ncu --profile-from-start off` (bench/ncu_dflash_step.sh).
    trainer.set_phase_timing(false);
    HSRING_CUDA_CHECK(cudaProfilerStart());
    (void)trainer.compute_gradients_bf16(device.as<uint16_t>(), view);
    trainer.apply_gradients();
    HSRING_CUDA_CHECK(cudaStreamSynchronize(trainer.stream()));
    HSRING_CUDA_CHECK(cudaProfilerStop());
  }
  return 0;
}

int run(const Options& o) {
  gpu::use_gpu(o.gpu);
  if (o.objective == "dflash") {
    std::printf("gpu=%s\n", gpu::describe_gpu(o.gpu).c_str());
    return run_dflash(o);
  }
  std::printf("gpu=%s\n", gpu::describe_gpu(o.gpu).c_str());
  train::SamePositionTrainerOptions options;
  options.model = train::default_same_position_config(model_config_of(o.model), o.layers, o.window);
  options.optimizer.schedule = {1e-4, 1e-5, 10, 1000};
  const train::SamePositionConfig& c = options.model;
  std::printf("drafter=%s\n", train::describe(c).c_str());

  const auto t0 = std::chrono::steady_clock::now();
  train::CudaSamePositionTrainer trainer(options);
  print("trainer_init_s", seconds_since(t0), "%.2f");
  double linear_params = 0;
  for (const train::ParamInfo& t : trainer.layout().tensors)
    if (t.shape.size() == 2 && t.name != "embed_tokens.weight") linear_params += double(t.size);
  print("parameters", double(trainer.layout().total), "%.0f");

  const Batch batch = make_batch(o.tokens, c.vocab_size);
  const auto t = uint32_t(batch.tokens.size());
  double pairs = 0;  // (query, key) pairs inside the window, summed over documents
  for (size_t d = 0; d + 1 < batch.offsets.size(); ++d) {
    const uint32_t n = uint32_t(batch.offsets[d + 1] - batch.offsets[d]);
    for (uint32_t q = 0; q < n; ++q) pairs += std::min(q + 1, c.window);
  }
  print("tokens", t, "%.0f");
  print("documents", double(batch.offsets.size() - 1), "%.0f");

  std::vector<uint16_t> features(uint64_t(t) * c.feature_dim());
  uint64_t state = 11;
  for (uint16_t& f : features) {  // bf16 of magnitude 2^-7 .. 2^-5, either sign
    const uint64_t r = splitmix64(state);
    f = uint16_t(0x3c00u + r % 0x200u) | uint16_t((r >> 20) & 0x8000u);
  }
  gpu::DeviceBuffer device = gpu::DeviceBuffer::allocate(features.size() * 2);
  HSRING_CUDA_CHECK(
      cudaMemcpy(device.data(), features.data(), device.size(), cudaMemcpyHostToDevice));
  const std::vector<float> no_features;
  const train::DrafterBatch view{no_features, batch.tokens, batch.positions, batch.offsets,
                                 batch.labels};

  std::vector<double> step_ms, update_ms;
  double loss = 0;
  for (uint32_t i = 0; i < o.warmup + o.iterations; ++i) {
    const auto start = std::chrono::steady_clock::now();
    loss = trainer.compute_gradients_bf16(device.as<uint16_t>(), view).loss;
    HSRING_CUDA_CHECK(cudaStreamSynchronize(trainer.stream()));  // the backward's tail
    const auto mid = std::chrono::steady_clock::now();
    trainer.apply_gradients();
    HSRING_CUDA_CHECK(cudaStreamSynchronize(trainer.stream()));
    if (i >= o.warmup) {
      step_ms.push_back(seconds_since(start) * 1e3);
      update_ms.push_back(seconds_since(mid) * 1e3);
    }
  }
  size_t free = 0, total = 0;
  HSRING_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  print("gpu_memory_used_bytes", double(total - free), "%.0f");
  print("loss", loss, "%.3f");

  const double hd_heads = double(c.head_dim) * c.num_heads;
  const double flops = 6.0 * linear_params * t + (4.0 + 14.0) * hd_heads * pairs;
  const double ms = median(step_ms);
  print("step_ms", ms, "%.1f");
  print("adamw_ms", median(update_ms), "%.1f");
  print("step_tokens_per_s", t / (ms * 1e-3), "%.0f");
  print("step_flops", flops, "%.4g");
  const double step_tflops = flops / (ms * 1e-3) / 1e12;
  print("step_tflops", step_tflops, "%.1f");
  std::printf("cublas_gemm_shape=%ux%ux%u\n", o.gemm_m, o.gemm_k, o.gemm_n);
  const double gemm = gemm_tflops(o);
  print("gemm_tflops", gemm, "%.1f");
  print("step_over_gemm", step_tflops / gemm, "%.3f");
  return 0;
}

}  // namespace
}  // namespace hsring

int main(int argc, char** argv) {
  hsring::Options o;
  CLI::App app{"CUDA drafter training step against cuBLAS's GEMM rate", "drafter_step_bench"};
  app.add_option("--objective", o.objective, "Step timed: dflash or same-position")
      ->capture_default_str()
      ->check(CLI::IsMember({"dflash", "same-position"}));
  app.add_option("--draft-layers", o.draft_layers, "DFlash: draft layers")->capture_default_str();
  app.add_option("--anchors", o.anchors, "DFlash: blocks per batch")->capture_default_str();
  app.add_option("--batch-out", o.batch_out,
                 "DFlash: write the batch's documents and anchors here (the torch baseline's)");
  app.add_option("--model", o.model, "Target whose default drafter is timed")
      ->capture_default_str();
  app.add_option("--tokens", o.tokens, "Tokens per batch")->capture_default_str();
  app.add_option("--iterations", o.iterations, "Timed steps")->capture_default_str();
  app.add_option("--gpu", o.gpu, "GPU id")->capture_default_str();
  app.add_flag("--phases", o.phases, "DFlash: one more step timed phase by phase");
  app.add_flag("--profile", o.profile,
               "DFlash: one more step between cudaProfilerStart and cudaProfilerStop");
  app.add_option("--warmup", o.warmup, "Untimed steps first")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return hsring::run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
