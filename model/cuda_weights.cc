#include "model/cuda_weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdio>

#include "common/error.h"
#include "gpu/device.h"
#include "gpu/memlock.h"
#include "gpu/ops/bf16_convert.h"
#include "model/float_convert.h"

namespace hsring {

namespace {

// Each tensor starts on a 256-byte boundary, as cudaMalloc's own allocations do, so every
// vector access of the kernels and cuBLAS is aligned.
constexpr uint64_t kAlign = 256;
// fp32 values converted per step of an upload: bounds the staging buffer to 64 MiB.
constexpr uint64_t kStagingFloats = uint64_t(16) << 20;

uint64_t element_count(const std::vector<int64_t>& shape) {
  uint64_t count = 1;
  for (int64_t d : shape) count *= uint64_t(d);
  return count;
}

std::string billions(uint64_t count) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f B", double(count) / 1e9);
  return text;
}

// Assigns every tensor an offset in one block; returns the block's size.
class Layout {
 public:
  uint64_t take(uint64_t bytes) {
    const uint64_t at = size_;
    size_ += (bytes + kAlign - 1) / kAlign * kAlign;
    return at;
  }
  uint64_t size() const { return size_; }

 private:
  uint64_t size_ = 0;
};

[[noreturn]] void throw_out_of_memory(const ModelConfig& config, uint64_t bytes, int gpu,
                                      const std::string& cause) {
  size_t free = 0, total = 0;
  std::string free_text = "an unknown amount";
  if (cudaMemGetInfo(&free, &total) == cudaSuccess)
    free_text = gpu::human_bytes(free);
  else
    (void)cudaGetLastError();
  throw gpu::cuda_error(
      cudaErrorMemoryAllocation,
      fmt::format("model '{}' needs {} of GPU memory for its weights ({} "
                  "parameters in bf16), but {} has {} free{}{}",
                  config.name, gpu::human_bytes(bytes), billions(parameter_count(config)),
                  gpu::describe_gpu(gpu), free_text, cause,
                  config.has_experts()
                      ? "; a mixture-of-experts target must fit one GPU (expert parallelism "
                        "across GPUs is not built)"
                      : ""));
}

}  // namespace

uint32_t router_rows(const ModelConfig& c) {
  return (c.moe.num_experts + (c.moe.shared_intermediate ? 1 : 0) + 7) / 8 * 8;
}

DeviceWeights DeviceWeights::allocate(const ModelConfig& c, int gpu) {
  DeviceWeights w;
  const uint64_t h = c.hidden_size;
  const uint64_t inter = c.intermediate_size;
  w.prefix_ = c.weight_prefix;
  w.q_rows_ = c.attention_gate ? 2 * c.q_dim() : c.q_dim();
  w.kv_rows_ = c.kv_dim();
  w.inter_ = c.intermediate_size;
  w.hidden_ = c.hidden_size;
  const DeltaNetShape& dn = c.delta_net;
  w.conv_dim_ = dn.conv_dim();
  w.delta_v_dim_ = dn.v_dim();
  w.delta_v_heads_ = dn.v_heads;
  const MoeShape& moe = c.moe;
  w.experts_ = moe.num_experts;
  w.expert_inter_ = moe.expert_intermediate;
  w.shared_inter_ = moe.shared_intermediate;

  // Offsets first, pointers once the block exists.
  Layout layout;
  const uint64_t embed = layout.take(uint64_t(c.vocab_size) * h * 2);
  const uint64_t head = c.tie_embeddings ? embed : layout.take(uint64_t(c.vocab_size) * h * 2);
  const uint64_t final_norm = layout.take(h * 4);
  struct LayerOffsets {
    bool delta = false;
    uint64_t qkv, o, gate_up, down, input_norm, post_norm, q_norm, k_norm, qkv_bias;
    uint64_t delta_in, delta_conv, delta_out, dt_bias, a_log, delta_norm;
    bool experts = false;
    uint64_t router, experts_gate_up, experts_down, shared_gate_up, shared_down;
  };
  const uint64_t delta_in_rows = uint64_t(w.conv_dim_) + w.delta_v_dim_ + 2ull * dn.v_heads;
  std::vector<LayerOffsets> offsets(c.num_layers);
  for (uint32_t i = 0; i < c.num_layers; ++i) {
    LayerOffsets& l = offsets[i];
    l.delta = c.kind(i) == LayerKind::kDeltaNet;
    if (l.delta) {
      l.delta_in = layout.take(delta_in_rows * h * 2);
      l.delta_conv = layout.take(uint64_t(w.conv_dim_) * dn.conv_kernel * 2);
      l.delta_out = layout.take(h * w.delta_v_dim_ * 2);
      l.dt_bias = layout.take(uint64_t(dn.v_heads) * 4);
      l.a_log = layout.take(uint64_t(dn.v_heads) * 4);
      l.delta_norm = layout.take(uint64_t(dn.v_head_dim) * 4);
    } else {
      l.qkv = layout.take((uint64_t(w.q_rows_) + 2ull * w.kv_rows_) * h * 2);
      l.o = layout.take(h * c.q_dim() * 2);
      l.q_norm = c.qk_norm ? layout.take(uint64_t(c.head_dim) * 4) : 0;
      l.k_norm = c.qk_norm ? layout.take(uint64_t(c.head_dim) * 4) : 0;
      l.qkv_bias = c.qkv_bias ? layout.take((uint64_t(w.q_rows_) + 2ull * w.kv_rows_) * 4) : 0;
    }
    l.experts = c.mlp_kind(i) == MlpKind::kExperts;
    if (l.experts) {
      const uint64_t ei = moe.expert_intermediate, si = moe.shared_intermediate;
      l.router = layout.take(uint64_t(router_rows(c)) * h * 2);
      l.experts_gate_up = layout.take(uint64_t(moe.num_experts) * 2 * ei * h * 2);
      l.experts_down = layout.take(uint64_t(moe.num_experts) * h * ei * 2);
      l.shared_gate_up = si ? layout.take(2 * si * h * 2) : 0;
      l.shared_down = si ? layout.take(h * si * 2) : 0;
    } else {
      l.gate_up = layout.take(2 * inter * h * 2);
      l.down = layout.take(h * inter * 2);
    }
    l.input_norm = layout.take(h * 4);
    l.post_norm = layout.take(h * 4);
  }

  // Ask first: a clear message beats a failed cudaMalloc deep inside a larger request.
  size_t free = 0, total = 0;
  HSRING_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  if (layout.size() > free) throw_out_of_memory(c, layout.size(), gpu, "");
  void* block = nullptr;
  if (const cudaError_t err = cudaMalloc(&block, layout.size()); err != cudaSuccess) {
    (void)cudaGetLastError();
    if (err == cudaErrorMemoryAllocation)
      throw_out_of_memory(c, layout.size(), gpu, " (cudaMalloc failed)");
    gpu::throw_cuda_error(err, "cudaMalloc(weights)", __FILE__, __LINE__);
  }
  w.memory_ = gpu::UniqueCuda<void*, gpu::DeviceMemory::free>(block);
  w.bytes_ = layout.size();

  auto* base = reinterpret_cast<unsigned char*>(block);
  auto bf16_at = [base](uint64_t at) { return reinterpret_cast<Bf16*>(base + at); };
  auto f32_at = [base](uint64_t at) { return reinterpret_cast<float*>(base + at); };
  w.embed_ = bf16_at(embed);
  w.lm_head_ = bf16_at(head);
  w.final_norm_ = f32_at(final_norm);
  w.layers_.resize(c.num_layers);
  for (uint32_t i = 0; i < c.num_layers; ++i) {
    const LayerOffsets& l = offsets[i];
    DeviceLayerWeights& d = w.layers_[i];
    if (l.delta) {
      d.delta_in = bf16_at(l.delta_in);
      d.delta_conv = bf16_at(l.delta_conv);
      d.delta_out = bf16_at(l.delta_out);
      d.delta_dt_bias = f32_at(l.dt_bias);
      d.delta_a_log = f32_at(l.a_log);
      d.delta_norm = f32_at(l.delta_norm);
    } else {
      d.qkv = bf16_at(l.qkv);
      d.o = bf16_at(l.o);
      d.q_norm = c.qk_norm ? f32_at(l.q_norm) : nullptr;
      d.k_norm = c.qk_norm ? f32_at(l.k_norm) : nullptr;
      d.qkv_bias = c.qkv_bias ? f32_at(l.qkv_bias) : nullptr;
    }
    if (l.experts) {
      d.router = bf16_at(l.router);
      // The padding rows: zero logits nobody reads, but never NaNs from stale memory.
      const uint64_t used = uint64_t(c.moe.num_experts) + (c.moe.shared_intermediate ? 1 : 0);
      HSRING_CUDA_CHECK(
          cudaMemset(d.router + used * h, 0, (uint64_t(router_rows(c)) - used) * h * 2));
      d.experts_gate_up = bf16_at(l.experts_gate_up);
      d.experts_down = bf16_at(l.experts_down);
      d.shared_gate_up = c.moe.shared_intermediate ? bf16_at(l.shared_gate_up) : nullptr;
      d.shared_down = c.moe.shared_intermediate ? bf16_at(l.shared_down) : nullptr;
    } else {
      d.gate_up = bf16_at(l.gate_up);
      d.down = bf16_at(l.down);
    }
    d.input_norm = f32_at(l.input_norm);
    d.post_norm = f32_at(l.post_norm);
  }
  return w;
}

DeviceWeights::Place DeviceWeights::place(const std::string& name) const {
  if (name == prefix_ + "embed_tokens.weight") return {embed_, false};
  if (name == "lm_head.weight") return {lm_head_, false};
  if (name == prefix_ + "norm.weight") return {final_norm_, true};
  const std::string prefix = prefix_ + "layers.";
  if (name.compare(0, prefix.size(), prefix) == 0) {
    uint32_t index = 0;
    const char* first = name.data() + prefix.size();
    const char* last = name.data() + name.size();
    const auto [end, ec] = std::from_chars(first, last, index);
    if (ec == std::errc() && end != last && *end == '.' && index < layers_.size()) {
      const std::string field(end + 1, last);
      const DeviceLayerWeights& l = layers_[index];
      const uint64_t h = hidden_;
      if (field == "input_layernorm.weight") return {l.input_norm, true};
      if (field == "post_attention_layernorm.weight") return {l.post_norm, true};
      if (l.delta_in) {
        const uint64_t z_at = uint64_t(conv_dim_) * h;
        const uint64_t b_at = z_at + uint64_t(delta_v_dim_) * h;
        if (field == "linear_attn.in_proj_qkv.weight") return {l.delta_in, false};
        if (field == "linear_attn.in_proj_z.weight") return {l.delta_in + z_at, false};
        if (field == "linear_attn.in_proj_b.weight") return {l.delta_in + b_at, false};
        if (field == "linear_attn.in_proj_a.weight")
          return {l.delta_in + b_at + uint64_t(delta_v_heads_) * h, false};
        if (field == "linear_attn.conv1d.weight") return {l.delta_conv, false};
        if (field == "linear_attn.dt_bias") return {l.delta_dt_bias, true};
        if (field == "linear_attn.A_log") return {l.delta_a_log, true};
        if (field == "linear_attn.norm.weight") return {l.delta_norm, true};
        if (field == "linear_attn.out_proj.weight") return {l.delta_out, false};
      }
      if (field == "self_attn.q_norm.weight" && l.q_norm) return {l.q_norm, true};
      if (field == "self_attn.k_norm.weight" && l.k_norm) return {l.k_norm, true};
      if (field == "self_attn.q_proj.weight") return {l.qkv, false};
      if (field == "self_attn.k_proj.weight") return {l.qkv + q_rows_ * h, false};
      if (field == "self_attn.v_proj.weight") return {l.qkv + (q_rows_ + kv_rows_) * h, false};
      if (field == "self_attn.o_proj.weight") return {l.o, false};
      if (l.qkv_bias) {
        if (field == "self_attn.q_proj.bias") return {l.qkv_bias, true};
        if (field == "self_attn.k_proj.bias") return {l.qkv_bias + q_rows_, true};
        if (field == "self_attn.v_proj.bias") return {l.qkv_bias + q_rows_ + kv_rows_, true};
      }
      if (l.router) {
        if (const Place to = expert_place(l, field); to.data) return to;
      }
      if (field == "mlp.gate_proj.weight") return {l.gate_up, false};
      if (field == "mlp.up_proj.weight") return {l.gate_up + uint64_t(inter_) * h, false};
      if (field == "mlp.down_proj.weight") return {l.down, false};
    }
  }
  throw Error(Errc::kModelBadConfig,
              "the GPU weight layout has no place for tensor '" + name + "'");
}

DeviceWeights::Place DeviceWeights::expert_place(const DeviceLayerWeights& l,
                                                 const std::string& field) const {
  const uint64_t h = hidden_;
  if (field == "mlp.gate.weight") return {l.router, false};
  if (field == "mlp.shared_expert_gate.weight" && shared_inter_)
    return {l.router + uint64_t(experts_) * h, false};
  if (l.shared_gate_up) {
    if (field == "mlp.shared_expert.gate_proj.weight") return {l.shared_gate_up, false};
    if (field == "mlp.shared_expert.up_proj.weight")
      return {l.shared_gate_up + uint64_t(shared_inter_) * h, false};
    if (field == "mlp.shared_expert.down_proj.weight") return {l.shared_down, false};
  }
  const std::string experts = "mlp.experts.";
  if (field.compare(0, experts.size(), experts) != 0) return {};
  uint32_t e = 0;
  const char* first = field.data() + experts.size();
  const char* last = field.data() + field.size();
  const auto [end, ec] = std::from_chars(first, last, e);
  if (ec != std::errc() || end == last || *end != '.' || e >= experts_) return {};
  const std::string proj(end + 1, last);
  const uint64_t size = uint64_t(expert_inter_) * h;  // one [I_e, H] or [H, I_e] matrix
  if (proj == "gate_proj.weight") return {l.experts_gate_up + e * 2 * size, false};
  if (proj == "up_proj.weight") return {l.experts_gate_up + e * 2 * size + size, false};
  if (proj == "down_proj.weight") return {l.experts_down + e * size, false};
  return {};
}

void DeviceWeights::upload(const ModelConfig& config, const ModelWeights& host,
                           cudaStream_t stream) {
  gpu::DeviceBuffer staging;
  for_each_weight(
      config, host,
      [&](const std::string& name, const std::vector<int64_t>&, const std::vector<float>& values) {
        const Place to = place(name);
        if (to.fp32) {
          HSRING_CUDA_CHECK(cudaMemcpyAsync(to.data, values.data(), values.size() * sizeof(float),
                                            cudaMemcpyHostToDevice, stream));
          return;
        }
        if (staging.size() == 0)
          staging = gpu::DeviceBuffer::allocate(kStagingFloats * sizeof(float));
        auto* dst = static_cast<Bf16*>(to.data);
        // Stream order keeps a chunk's conversion ahead of the next chunk's copy.
        for (uint64_t i = 0; i < values.size(); i += kStagingFloats) {
          const uint64_t n = std::min<uint64_t>(kStagingFloats, values.size() - i);
          HSRING_CUDA_CHECK(cudaMemcpyAsync(staging.data(), values.data() + i, n * sizeof(float),
                                            cudaMemcpyHostToDevice, stream));
          HSRING_CUDA_CHECK(gpu::launch_float_to_bf16(staging.as<float>(), n, dst + i, stream));
        }
      });
  HSRING_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void DeviceWeights::randomize(const ModelConfig& config, uint64_t seed, cudaStream_t stream) {
  for (const WeightSpec& spec : weight_specs(config)) {
    const Place to = place(spec.name);
    const RandomFill fill = random_fill(spec, seed);
    const uint64_t count = element_count(spec.shape);
    if (to.fp32)
      HSRING_CUDA_CHECK(launch_random_fill(static_cast<float*>(to.data), count, fill.key,
                                           fill.scale, fill.offset, stream));
    else
      HSRING_CUDA_CHECK(launch_random_fill(static_cast<Bf16*>(to.data), count, fill.key, fill.scale,
                                           fill.offset, stream));
  }
  HSRING_CUDA_CHECK(cudaStreamSynchronize(stream));
}

ModelWeights DeviceWeights::download(const ModelConfig& config) const {
  ModelWeights w;
  std::vector<uint16_t> bits;
  for (const WeightTensor& t : weight_tensors(config, w)) {
    const Place from = place(t.name);
    std::vector<float>& values = *t.data;
    if (from.fp32) {
      HSRING_CUDA_CHECK(cudaMemcpy(values.data(), from.data, values.size() * sizeof(float),
                                   cudaMemcpyDeviceToHost));
      continue;
    }
    bits.resize(values.size());
    HSRING_CUDA_CHECK(
        cudaMemcpy(bits.data(), from.data, bits.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    std::transform(bits.begin(), bits.end(), values.begin(), bf16_to_float);
  }
  return w;
}

}  // namespace hsring
