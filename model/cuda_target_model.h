// The target's forward on one GPU: bf16 weights, cuBLAS GEMMs with fp32 accumulation, an
// fp32 residual stream, and our own kernels for the rest (model/cuda_kernels.h, and the ops it
// shares with the training step from gpu/ops/). It computes
// what the CPU reference does, within bf16 rounding, and is bit-reproducible: the same batch
// always gives the same bits. forward_device() leaves its results on the GPU for the
// pipeline; forward() is the host TargetModel interface over it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "model/cuda_kv_cache.h"
#include "model/model_config.h"
#include "model/model_weights.h"
#include "model/target_model.h"

namespace hsring {

// Where forward_device writes one captured layer: element (t, d) goes to
//   data + t * row_pitch_bytes + d * dtype_size(dtype),  t < T, d < H.
// K separate [T, H] regions: row_pitch_bytes = H * size. One [T, K*H] region: layer k's
// data = base + k * H * size, row_pitch_bytes = K * H * size.
struct CaptureRegion {
  void* data = nullptr;  // device memory
  uint64_t row_pitch_bytes = 0;
};

// Device-side outputs of one forward, all owned by the caller.
struct DeviceCapture {
  DType dtype = DType::kBF16;         // captured layers: rounded to nearest even
  std::vector<CaptureRegion> layers;  // one per request.capture_layers entry, in order
  int32_t* greedy = nullptr;          // [T] int32; required when request.greedy
  float* logits = nullptr;            // [T, V] fp32; required when request.logits
  // When not empty, `logits` holds only these rows' (host row indices < T, any order),
  // [logit_rows.size(), V]: a decoder that samples a few rows of a long packed batch need
  // not hold [T, V] (GBs for a 150k vocabulary).
  std::span<const int32_t> logit_rows;
};

// Thread safety: one forward at a time (the model owns its scratch memory and its cuBLAS
// handle). Successive forward_device calls must use one stream, or the caller must order
// them: they share scratch memory.
class CudaTargetModel final : public TargetModel {
 public:
  // Uploads `weights` (fp32, HF layout) to GPU `gpu`, rounded to bf16. Throws
  // Error(kModelBadConfig) for a config this forward cannot run (head_dim other than 32, 64,
  // 128, 256; DeltaNet head dims outside delta_net_supports) or weights that do
  // not fit it, Error(kCuda) for CUDA failures (out of memory: a message naming the
  // model, the bytes needed and the GPU).
  CudaTargetModel(ModelConfig config, const ModelWeights& weights, int gpu = 0);
  // Random weights drawn on the GPU (seconds even for qwen3-8b): the bf16 rounding of
  // random_weights(config, seed), bit for bit. Throws as the constructor.
  static std::unique_ptr<CudaTargetModel> with_random_weights(ModelConfig config, uint64_t seed,
                                                              int gpu = 0);
  ~CudaTargetModel() override;  // waits for the last forward_device to finish
  CudaTargetModel(const CudaTargetModel&) = delete;
  CudaTargetModel& operator=(const CudaTargetModel&) = delete;

  const ModelConfig& config() const override;
  int gpu() const;
  uint64_t weight_bytes() const;  // device memory the weights take

  // Allocates the scratch of a forward over up to `max_tokens` tokens now (a few GB for
  // qwen3-8b at 16384), so that forwards never allocate. Without it the first forward over
  // more tokens than ever before waits for the previous forward and reallocates. Throws
  // Error(kCuda).
  void reserve(uint32_t max_tokens);

  // The host interface: runs forward_device on the model's own stream and copies the fp32
  // results back. Throws Error(kModel) on bad input, Error(kCuda) on CUDA failure.
  void forward(const PackedBatch& batch, const ForwardRequest& request,
               ForwardOutput& out) override;

  // Enqueues the forward on `stream` and returns: uploads tokens and positions (through
  // pinned staging owned by the model; the host arrays may be reused at once), runs every
  // layer up to the last one needed, writes each requested layer into out.layers[k] as
  // out.dtype, and the greedy labels / logits when requested. Every launch goes to
  // `stream`; nothing synchronises the device. The host may wait only for the staging of the
  // forward two calls back, and for the previous forward when scratch must grow (reserve).
  // Makes gpu() the calling thread's current device. Throws Error(kModel) for a bad
  // batch, request or capture (missing pointers, a row pitch under H elements, an unknown
  // dtype), Error(kCuda) when CUDA or cuBLAS fail.
  //
  // With `prefix` (model/cuda_kv_cache.h), each document continues a sequence whose keys and
  // values are cached: its attention reads them, and its own are written there. Throws
  // Error(kModelBadConfig) for a model the cache cannot serve (cache_problem), Error(kModel)
  // for a prefix that does not describe the batch.
  void forward_device(const PackedBatch& batch, const ForwardRequest& request, cudaStream_t stream,
                      const DeviceCapture& out, const CachedPrefix* prefix = nullptr);

  // The weights as the forward uses them (bf16 widened to fp32; norms fp32): for tests.
  ModelWeights download_weights() const;

 private:
  struct Impl;
  explicit CudaTargetModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A CUDA model from `spec` on GPU `gpu`: a preset name ("tiny", "qwen3-8b", ...) with
// random weights drawn on the GPU from `seed` (the same values as open_cpu_model's, rounded
// to bf16), or a Hugging Face model folder, loaded on the host (model/hf_checkpoint.h) and
// uploaded. Throws Error (kModel..., kCuda).
std::unique_ptr<CudaTargetModel> open_cuda_model(const std::string& spec, uint64_t seed = 0,
                                                 int gpu = 0);

}  // namespace hsring
