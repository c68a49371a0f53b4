// What a training step reports of its loss, for every drafter objective and trainer.
#pragma once

#include <cstdint>
#include <vector>

namespace hsring::train {

struct LossStats {
  double loss = 0;       // mean cross-entropy over counted positions (0 when none)
  double agreement = 0;  // fraction of counted positions whose argmax is the label
  uint64_t tokens = 0;   // positions in the batch (T)
  uint64_t counted = 0;  // positions with a label in [0, vocab)
  uint64_t agreed = 0;   // counted positions whose argmax is the label
  // The DFlash objective's teacher-forced acceptance length (tau, tokens per target forward
  // under greedy verification, bonus token included); 0 for the same-position objective.
  double acceptance_length = 0;
  // DFlash: [B], accepted_at[j] blocks whose positions 1..j all matched, accepted_at[0] the
  // blocks (DflashStats'); empty for the same-position objective.
  std::vector<uint64_t> accepted_at;
};

}  // namespace hsring::train
