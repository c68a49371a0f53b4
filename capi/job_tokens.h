// Where a C API producer's batches get their tokens: hsring's shard reader (model rings),
// the synthetic function (synthetic rings, which drafters verify element by element), or
// the caller. Each is also the BatchPlanner of the producer, so a batch's slot header says
// what its tokens are. Reading and planning are pure functions of the batch id, which is
// what makes a re-produced batch identical (docs/ring-protocol.md, "nothing twice").
//
// Thread safety: none; the producer's thread owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "target_proc/hidden_state_source.h"
#include "target_proc/token_source.h"

namespace hsring::capi {

class JobTokens : public BatchPlanner {
 public:
  // True when fill() writes the labels too (synthetic rings); the caller writes them else.
  virtual bool fills_labels() const = 0;
  // True when fill() writes tokens, positions and document offsets.
  virtual bool fills_tokens() const = 0;
  // Writes batch `plan`'s token arrays into slot `slot`. Returns its loss mask per
  // position (1: the label at t counts; 0: the shard's mask leaves t + 1 out, so the
  // label must be kIgnoreLabel), or nothing when none is known. Throws Error.
  virtual std::vector<uint8_t> fill(const BatchPlan& plan, const Ring& ring, uint32_t slot) = 0;
};

enum class TokenOrigin { kAuto, kCaller };

// The tokens of target `target`'s batches in `ring`. kAuto: the shard reader over
// `options.data_dir` on a model ring (throws Error for missing or corrupt shards, or
// a vocabulary larger than the ring's), synthetic tokens on a synthetic ring.
std::unique_ptr<JobTokens> make_job_tokens(TokenOrigin origin, const Ring& ring, uint32_t target,
                                           const TokenSourceOptions& options);

}  // namespace hsring::capi
