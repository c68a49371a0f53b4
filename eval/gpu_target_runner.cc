#include "eval/gpu_target_runner.h"

#include <algorithm>

#include "gpu/cuda_check.h"

namespace hsring::eval {
namespace {

// A device buffer that grows to hold `bytes` (contents dropped when it does).
void ensure_bytes(gpu::DeviceBuffer& buffer, size_t bytes) {
  if (buffer.size() < bytes) buffer = gpu::DeviceBuffer::allocate(bytes + bytes / 4);
}

}  // namespace

void PackedDocs::add(std::span<const int32_t> doc, int32_t first) {
  tokens.insert(tokens.end(), doc.begin(), doc.end());
  for (size_t i = 0; i < doc.size(); ++i) positions.push_back(first + int32_t(i));
  offsets.push_back(int32_t(tokens.size()));
}

uint32_t capacity_for(std::span<const std::vector<int32_t>> prompts, uint32_t max_new_tokens) {
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  return uint32_t(longest + max_new_tokens);
}

GpuTargetRunner::GpuTargetRunner(CudaTargetModel& target, std::vector<int32_t> capture_layers)
    : target_(target),
      capture_layers_(std::move(capture_layers)),
      cacheable_(cache_problem(target.config()).empty()) {
  HSRING_CUDA_CHECK(cudaSetDevice(target.gpu()));
  stream_ = gpu::make_stream();
}

GpuTargetRunner::~GpuTargetRunner() = default;

size_t GpuTargetRunner::row_bytes() const {
  return capture_layers_.size() * target_.config().hidden_size * sizeof(float);
}

void GpuTargetRunner::prepare(uint32_t sequences, uint32_t capacity) {
  if (!cacheable_) return;
  if (cache_ && cache_->sequences() >= sequences && cache_->capacity() >= capacity) return;
  cache_.reset();  // the old one's memory first
  cache_ = std::make_unique<CudaKvCache>(target_.config(), sequences, capacity);
}

const std::byte* GpuTargetRunner::captured_row(size_t row) const {
  return captured_.data() + row * row_bytes();
}

std::span<const float> GpuTargetRunner::logits_row(size_t i, size_t rows) const {
  const size_t vocab = target_.config().vocab_size;
  return std::span<const float>(logits_).subspan(i * vocab, rows * vocab);
}

void GpuTargetRunner::forward(const PackedDocs& docs, std::span<const int32_t> slots,
                              std::span<const int32_t> cached, bool capture,
                              std::span<const int32_t> logit_rows) {
  const size_t rows = docs.tokens.size(), vocab = target_.config().vocab_size;
  ForwardRequest request;
  request.greedy = true;
  request.logits = !logit_rows.empty();
  DeviceCapture out;
  out.dtype = DType::kFP32;
  ensure_bytes(greedy_device_, rows * sizeof(int32_t));
  out.greedy = greedy_device_.as<int32_t>();
  if (request.logits) {
    // Only the asked rows': the target computes the others' in its own chunked scratch.
    ensure_bytes(logits_device_, logit_rows.size() * vocab * sizeof(float));
    out.logits = logits_device_.as<float>();
    out.logit_rows = logit_rows;
  }
  if (capture) {
    request.capture_layers = capture_layers_;
    ensure_bytes(captured_, rows * row_bytes());
    const size_t hidden = target_.config().hidden_size;
    for (size_t k = 0; k < capture_layers_.size(); ++k)
      out.layers.push_back({captured_.as<float>() + k * hidden, row_bytes()});
  }
  const CachedPrefix prefix{cache_.get(), slots, cached};
  target_.forward_device({docs.tokens, docs.positions, docs.offsets}, request, stream_.get(), out,
                         cache_ ? &prefix : nullptr);
  greedy_.resize(rows);
  HSRING_CUDA_CHECK(cudaMemcpyAsync(greedy_.data(), greedy_device_.data(), rows * sizeof(int32_t),
                                    cudaMemcpyDeviceToHost, stream_.get()));
  logits_.resize(logit_rows.size() * vocab);
  if (!logits_.empty())
    HSRING_CUDA_CHECK(cudaMemcpyAsync(logits_.data(), logits_device_.data(),
                                      logits_.size() * sizeof(float), cudaMemcpyDeviceToHost,
                                      stream_.get()));
  HSRING_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
}

std::vector<std::vector<int32_t>> GpuTargetRunner::greedy_decode(
    std::span<const std::vector<int32_t>> prompts, uint32_t max_new_tokens,
    std::span<const int32_t> stop_tokens, uint32_t group, const SamplingOptions& sampling,
    uint64_t first_prompt) {
  std::vector<std::vector<int32_t>> outputs(prompts.size());
  const bool sampled = !sampling.greedy();
  const auto stops = [&](int32_t token) {
    return std::find(stop_tokens.begin(), stop_tokens.end(), token) != stop_tokens.end();
  };
  for (size_t first = 0; first < prompts.size(); first += group) {
    const size_t count = std::min<size_t>(group, prompts.size() - first);
    prepare(uint32_t(count), capacity_for(prompts.subspan(first, count), max_new_tokens));
    std::vector<std::vector<int32_t>> seqs(prompts.begin() + std::ptrdiff_t(first),
                                           prompts.begin() + std::ptrdiff_t(first + count));
    std::vector<bool> done(count, max_new_tokens == 0);
    for (uint32_t step = 0; step < max_new_tokens; ++step) {
      // The unfinished sequences; with a cache, a step after the prefill feeds each its last
      // token only.
      PackedDocs docs;
      std::vector<int32_t> slots, cached, last_rows;
      std::vector<size_t> lanes;
      for (size_t i = 0; i < count; ++i) {
        if (done[i]) continue;
        const int32_t before = cacheable_ && step > 0 ? int32_t(seqs[i].size()) - 1 : 0;
        lanes.push_back(i);
        slots.push_back(int32_t(i));
        cached.push_back(before);
        docs.add(std::span<const int32_t>(seqs[i]).subspan(size_t(before)), before);
        if (sampled) last_rows.push_back(docs.end(lanes.size() - 1) - 1);
      }
      if (lanes.empty()) break;
      forward(docs, slots, cached, false, last_rows);
      for (size_t d = 0; d < lanes.size(); ++d) {
        std::vector<int32_t>& seq = seqs[lanes[d]];
        seq.push_back(sampled ? PromptSampler(sampling, first_prompt + first + lanes[d])
                                    .sample_target(logits_row(d), seq.size())
                              : greedy_[size_t(docs.end(d)) - 1]);
        done[lanes[d]] =
            stops(seq.back()) || seq.size() - prompts[first + lanes[d]].size() == max_new_tokens;
      }
    }
    for (size_t i = 0; i < count; ++i)
      outputs[first + i].assign(seqs[i].begin() + std::ptrdiff_t(prompts[first + i].size()),
                                seqs[i].end());
  }
  return outputs;
}

}  // namespace hsring::eval
