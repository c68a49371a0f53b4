// The layout of a model's parameters in one flat buffer: named tensors (HF names, shapes,
// offsets) that a model, its optimizer, gradient all-reduce and checkpoints share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hsring::train {

// Every tensor starts at a multiple of this many elements (256 bytes in fp32, the
// alignment cudaMalloc gives) so a device copy of the flat buffer can hand each tensor to
// cuBLAS as it is. The gaps between tensors are zero in every buffer and stay zero.
inline constexpr size_t kParamAlignment = 64;

struct ParamInfo {
  std::string name;            // HF-style: "fc.weight", "layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // [out, in] for Linear weights (HF layout), [dim] for norms
  size_t offset = 0;           // first element in the flat buffer
  size_t size = 0;             // elements: the product of shape
  bool weight_decay = true;    // false for norm weights (every 1-D tensor)
};

struct ParamLayout {
  std::vector<ParamInfo> tensors;  // in buffer order
  size_t total = 0;                // elements of the flat buffer, gaps included

  // The tensor called `name`, or nullptr.
  const ParamInfo* find(std::string_view name) const;
  // Same; throws Error(kModel) naming it.
  const ParamInfo& at(std::string_view name) const;
  // Appends tensor `name` of `shape` at the next aligned offset; weight decay for every
  // tensor of two or more dimensions (not the norms).
  void add(std::string name, std::vector<int64_t> shape);
};

// Where one decoder layer's tensors ("layers.<i>.*", HF names) start in a drafter's flat
// buffer: the CPU DFlash model and both CUDA trainers' layer (train/cuda_drafter_layer.h)
// read them. q_norm and k_norm are 0 in a layout without them (the same-position drafter's).
struct DrafterLayerOffsets {
  size_t input_norm = 0, q = 0, k = 0, v = 0, o = 0, q_norm = 0, k_norm = 0, post_norm = 0,
         gate = 0, up = 0, down = 0;
};
// Throws Error(kModel) naming a tensor of the layer that `layout` lacks.
DrafterLayerOffsets drafter_layer_offsets(const ParamLayout& layout, uint32_t layer);

// Whether the layer's q_proj, k_proj and v_proj rows lie back to back, so that [Wq; Wk; Wv]
// and [Wk; Wv] are matrices too (the GPU step's products read them so). They do unless the
// alignment of the offsets leaves gaps: when q_dim x width or kv_dim x width is not a
// multiple of kParamAlignment.
bool projections_adjacent(const DrafterLayerOffsets& o, size_t q_dim, size_t kv_dim, size_t width);

// The default initialisation of one tensor (t.size values at data), a pure function of
// (seed, t.name): 1 for a norm weight (1-D), uniform in +-1/sqrt(fan_in) for a Linear
// weight [out, in]. Every drafter layout initialises its ordinary tensors with this.
template <class Real>
void init_param_tensor(const ParamInfo& t, uint64_t seed, Real* data);

}  // namespace hsring::train
