// The fixed held-out batches a training drafter evaluates every --eval-every steps: held-out
// documents, packed like training batches, run once through the CPU target at start-up to
// get what a ring slot would carry (the captured layers, rounded to the ring's dtype, and
// the target's greedy labels under the data's loss mask). Their loss and teacher-forced tau
// at the current weights (DrafterTrainer::evaluate, no backward) go into the curves.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "train/drafter_trainer.h"

namespace hsring {

struct HeldOutSetOptions {
  std::string target_model;  // the target's spec, as the ring's targets run it
  uint64_t model_seed = 0;
  std::string data_dir;            // a token-shard folder (never "")
  bool held_out_only = false;      // only its held-out documents (data/held_out.h), else all
  std::vector<int32_t> layer_ids;  // the ring's captured layers
  DType dtype = DType::kBF16;      // the ring's: features are rounded to it, as slots are
  uint32_t max_tokens = 512;       // per batch, as the ring's slots
  uint32_t max_batches = 4;
  uint32_t threads = 0;
};

// Held-out statistics of one evaluation, over every batch of the set.
struct HeldOutStats {
  double loss = 0;               // counted-position-weighted mean of the batches' losses
  double acceptance_length = 0;  // 1 + accepted positions per block, over all blocks
  double agreement = 0;          // over all counted positions
};

class HeldOutSet {
 public:
  // Reads and packs the documents and runs the target over them (seconds for a small
  // target). Throws Error: a missing or bad corpus, no held-out document, a model error.
  static HeldOutSet build(const HeldOutSetOptions& options);

  // The trainer's statistics over the set, or nothing when the trainer cannot evaluate.
  std::optional<HeldOutStats> evaluate(train::DrafterTrainer& trainer) const;

  size_t batches() const { return batches_.size(); }
  uint64_t tokens() const;

 private:
  struct Batch {
    std::vector<float> features;  // [T, K*H]
    std::vector<int32_t> tokens, positions, doc_offsets, labels;
  };
  std::vector<Batch> batches_;
};

}  // namespace hsring
