// The target's side of decoding on one GPU, shared by `hsring eval --gpu`
// (eval/gpu_speculative_decode.h) and `hsring data generate --gpu`: packed forwards over
// many sequences at once, through a KV cache where the model allows one
// (model/cuda_kv_cache.h; otherwise each forward recomputes whole sequences), and plain
// greedy decoding or seeded sampling (eval/sampling.h) built on them.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "eval/sampling.h"
#include "gpu/cuda_handles.h"
#include "model/cuda_target_model.h"

namespace hsring::eval {

// Documents packed back to back for one forward; positions start at each document's
// `first` position (its cached length).
struct PackedDocs {
  std::vector<int32_t> tokens, positions, offsets{0};
  void add(std::span<const int32_t> doc, int32_t first = 0);
  int32_t begin(size_t doc) const { return offsets[doc]; }
  int32_t end(size_t doc) const { return offsets[doc + 1]; }
  size_t size() const { return offsets.size() - 1; }
};

// Positions a sequence of these prompts can reach: the longest prompt and every new token.
uint32_t capacity_for(std::span<const std::vector<int32_t>> prompts, uint32_t max_new_tokens);

// Thread safety: none; one forward at a time, on its own stream.
class GpuTargetRunner {
 public:
  // Forwards of `target` (on its GPU) returning its greedy labels, and the captured layers
  // `capture_layers` ([T, K*H] fp32 rows on the device) when asked. Throws Error(kCuda).
  GpuTargetRunner(CudaTargetModel& target, std::vector<int32_t> capture_layers);
  ~GpuTargetRunner();
  GpuTargetRunner(const GpuTargetRunner&) = delete;
  GpuTargetRunner& operator=(const GpuTargetRunner&) = delete;

  CudaTargetModel& target() const { return target_; }
  bool cached() const { return cacheable_; }  // forwards go through a KV cache
  cudaStream_t stream() const { return stream_.get(); }
  size_t row_bytes() const;  // one row of captured layers

  // Room for `sequences` sequences of up to `capacity` positions (a KV cache when cached()).
  void prepare(uint32_t sequences, uint32_t capacity);

  // One forward over `docs`: document i continues sequence slots[i] after cached[i]
  // positions (its positions from there; without a cache every cached[i] must be 0 and the
  // document is the whole sequence). Waits for it: greedy() holds its labels after, and
  // logits() the fp32 logits of the batch rows `logit_rows`, in that order, [rows * V] (only
  // these rows' are kept on the device and copied back: DeviceCapture::logit_rows).
  // REQUIRES: prepare() for these slots and lengths.
  void forward(const PackedDocs& docs, std::span<const int32_t> slots,
               std::span<const int32_t> cached, bool capture,
               std::span<const int32_t> logit_rows = {});
  std::span<const int32_t> greedy() const { return greedy_; }
  std::span<const float> logits() const { return logits_; }
  // Row i of logits() (logit_rows[i]'s).
  std::span<const float> logits_row(size_t i, size_t rows = 1) const;
  const std::byte* captured_row(size_t row) const;  // the last forward's, on the device

  // Plain greedy decoding of each prompt, `group` at a time: max_new_tokens tokens, or fewer
  // up to and including a first token of `stop_tokens`. With a non-greedy `sampling`, each
  // token is sampled instead, prompt i keyed as prompt first_prompt + i (PromptSampler).
  std::vector<std::vector<int32_t>> greedy_decode(std::span<const std::vector<int32_t>> prompts,
                                                  uint32_t max_new_tokens,
                                                  std::span<const int32_t> stop_tokens,
                                                  uint32_t group,
                                                  const SamplingOptions& sampling = {},
                                                  uint64_t first_prompt = 0);

 private:
  CudaTargetModel& target_;
  std::vector<int32_t> capture_layers_;
  bool cacheable_ = false;
  gpu::Stream stream_;
  std::unique_ptr<CudaKvCache> cache_;
  gpu::DeviceBuffer captured_, greedy_device_, logits_device_;
  std::vector<int32_t> greedy_;
  std::vector<float> logits_;
};

}  // namespace hsring::eval
