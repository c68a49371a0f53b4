#include "target_proc/slot_writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "common/error.h"
#include "model/float_convert.h"
#include "shm/ring.h"

namespace hsring {

void convert_rows(const float* src, size_t rows, size_t hidden, DType dtype, std::byte* dst,
                  size_t dst_pitch) {
  for (size_t r = 0; r < rows; ++r) {
    const float* in = src + r * hidden;
    std::byte* out = dst + r * dst_pitch;
    if (dtype == DType::kFP32) {
      std::memcpy(out, in, hidden * sizeof(float));
      continue;
    }
    const bool bf16 = dtype == DType::kBF16;
    for (size_t i = 0; i < hidden; ++i) {
      const uint16_t bits = bf16 ? float_to_bf16(in[i]) : float_to_fp16(in[i]);
      std::memcpy(out + 2 * i, &bits, 2);
    }
  }
}

ModelSlotWriter::ModelSlotWriter(std::unique_ptr<TargetModel> model, const RingShape& shape)
    : model_(std::move(model)), shape_(shape) {
  const ModelConfig& c = model_->config();
  const auto bad = [&c](const std::string& what) {
    return Error(Errc::kModel, "ring shape does not fit model '" + c.name + "': " + what);
  };
  if (shape.hidden_size != c.hidden_size)
    throw bad(
        fmt::format("ring hidden size {}, model hidden size {}", shape.hidden_size, c.hidden_size));
  if (shape.num_layers < 1 || shape.num_layers > kMaxCapturedLayers)
    throw bad(fmt::format("captured layer count {}", shape.num_layers));
  if (dtype_size(shape.dtype) == 0) throw bad("unknown ring dtype");
  request_.capture_layers.assign(shape.layer_ids, shape.layer_ids + shape.num_layers);
  request_.logits = false;
  request_.greedy = true;
  // Repeats are a wiring mistake (layer_ids left zeroed), never a useful choice.
  for (size_t a = 0; a < request_.capture_layers.size(); ++a)
    for (size_t b = a + 1; b < request_.capture_layers.size(); ++b)
      if (request_.capture_layers[a] == request_.capture_layers[b])
        throw bad(
            fmt::format("the ring's layer ids repeat layer {} (set RingShape::layer_ids, e.g. from "
                        "default_capture_layers)",
                        request_.capture_layers[a]));
  try {
    validate_request(request_, c);
  } catch (const Error& e) {
    throw bad(e.what());
  }
}

void ModelSlotWriter::produce(const PackedBatch& batch, const Ring& ring, uint32_t slot) {
  const RingShape& s = shape_;
  // Every write below is bounded by shape_: make sure it is this ring's shape.
  const RingShape& r = ring.shape();
  if (r.hidden_size != s.hidden_size || r.num_layers != s.num_layers || r.dtype != s.dtype ||
      r.split_layers != s.split_layers || r.max_tokens != s.max_tokens)
    throw Error(Errc::kModel,
                "ring '" + ring.name() + "' does not have the shape the writer was made for");
  if (slot >= ring.slot_count())
    throw Error(Errc::kModel, fmt::format("slot {} is outside ring '{}'", slot, ring.name()));
  if (batch.tokens.size() > s.max_tokens)
    throw Error(Errc::kModel, fmt::format("bad batch: {} tokens exceed the slot's {}",
                                          batch.tokens.size(), s.max_tokens));
  model_->forward(batch, request_, output_);
  const size_t rows = output_.token_count;
  const size_t elem = dtype_size(s.dtype);
  for (uint32_t k = 0; k < s.num_layers; ++k) {
    // Split: layer k has its own [T, H] region. Concatenated: it is column block k of
    // [T, K*H], so rows are K*H elements apart.
    std::byte* dst = s.split_layers ? ring.layer_region(slot, k)
                                    : ring.payload(slot) + size_t(k) * s.hidden_size * elem;
    const size_t pitch = (s.split_layers ? 1 : s.num_layers) * size_t(s.hidden_size) * elem;
    convert_rows(output_.captured[k].data(), rows, s.hidden_size, s.dtype, dst, pitch);
  }
  std::copy(batch.tokens.begin(), batch.tokens.end(), ring.tokens(slot));
  std::copy(batch.positions.begin(), batch.positions.end(), ring.positions(slot));
  std::copy(batch.doc_offsets.begin(), batch.doc_offsets.end(), ring.doc_offsets(slot));
  std::copy(output_.greedy.begin(), output_.greedy.end(), ring.labels(slot));
}

}  // namespace hsring
