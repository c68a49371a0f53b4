// The adapter between a TargetModel and the ring: runs the forward over a packed batch
// and writes what a slot carries (the K captured layers in the ring's dtype, tokens,
// positions, document offsets and greedy labels). The target worker owns the protocol
// (claim, bind, publish); this only fills a payload it has been given.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "model/target_model.h"
#include "shm/ring_layout.h"

namespace hsring {

class Ring;

// Converts rows of fp32 hidden states [rows, hidden] to `dtype` (bf16 and fp16 round to
// nearest even) at `dst`, rows `dst_pitch` bytes apart.
void convert_rows(const float* src, size_t rows, size_t hidden, DType dtype, std::byte* dst,
                  size_t dst_pitch);

// Thread safety: one produce() at a time (the model and the output buffers are reused).
class ModelSlotWriter {
 public:
  // The captured layers are the ring's shape.layer_ids[0..num_layers). Throws
  // Error(kModel) when the shape does not fit the model: hidden sizes differ, a
  // layer id is outside the model or repeated, or the dtype is unknown.
  ModelSlotWriter(std::unique_ptr<TargetModel> model, const RingShape& shape);

  TargetModel& model() const { return *model_; }
  const std::vector<int32_t>& capture_layers() const { return request_.capture_layers; }

  // Runs the forward and writes slot `slot`'s payload: layer k of the slot gets the output
  // of decoder layer capture_layers()[k] (split regions or the concatenated [T, K*H]
  // region, as the ring is laid out); labels[t] is the model's greedy next token at t (for
  // every t, including a document's last token). Rows past the batch are left as they are;
  // the slot header is not touched. Throws Error(kModel) for a bad batch, one longer
  // than max_tokens, a slot out of range, or a ring of another shape than the constructor's.
  void produce(const PackedBatch& batch, const Ring& ring, uint32_t slot);

  // The last forward's fp32 output (for tests and diagnostics).
  const ForwardOutput& last_output() const { return output_; }

 private:
  std::unique_ptr<TargetModel> model_;
  RingShape shape_;
  ForwardRequest request_;
  ForwardOutput output_;
};

}  // namespace hsring
