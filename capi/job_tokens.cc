#include "capi/job_tokens.h"

#include <fmt/format.h>

#include "common/error.h"
#include "data/token_batch.h"
#include "shm/ring.h"

namespace hsring::capi {

namespace {

class SyntheticTokens final : public JobTokens {
 public:
  explicit SyntheticTokens(const RingShape& shape) : planner_(shape) {}
  BatchPlan plan(uint64_t batch_id) override { return planner_.plan(batch_id); }
  bool fills_labels() const override { return true; }
  bool fills_tokens() const override { return true; }
  std::vector<uint8_t> fill(const BatchPlan& plan, const Ring& ring, uint32_t slot) override {
    fill_synthetic_metadata(ring, slot, plan);
    return {};
  }

 private:
  SyntheticPlanner planner_;
};

// Where the built-in target's labels become kIgnoreLabel: data::mask_target_labels run
// over a row of zeros, so the rule lives in one place.
std::vector<uint8_t> loss_mask_of(const data::TokenBatch& batch) {
  std::vector<int32_t> probe(batch.token_count(), 0);
  data::mask_target_labels(batch, probe.data());
  std::vector<uint8_t> counts(probe.size());
  for (size_t t = 0; t < probe.size(); ++t) counts[t] = probe[t] == kIgnoreLabel ? 0 : 1;
  return counts;
}

// The same TokenSource hsring-target's model source reads (io_uring read-ahead along the
// shard, direct reads for adopted batches); labels are the caller's (the target's greedy
// tokens), as ModelSlotWriter writes them for the built-in target.
class ShardTokens final : public JobTokens {
 public:
  ShardTokens(const Ring& ring, uint32_t target, const TokenSourceOptions& options)
      : tokens_(options, model_of(ring), ring.shape().max_tokens, target,
                ring.shape().num_targets) {}
  BatchPlan plan(uint64_t batch_id) override { return tokens_.plan(batch_id); }
  bool fills_labels() const override { return false; }
  bool fills_tokens() const override { return true; }
  std::vector<uint8_t> fill(const BatchPlan& plan, const Ring& ring, uint32_t slot) override {
    const data::TokenBatch batch = tokens_.fetch(plan.batch_id);
    // The data's labels land too; write_labels replaces them (publish requires it).
    if (!data::copy_to_slot_arrays(batch, ring.shape().max_tokens, ring.tokens(slot),
                                   ring.positions(slot), ring.doc_offsets(slot), ring.labels(slot)))
      throw Error(Errc::kData,
                  fmt::format("batch {} has {} tokens, more than the ring's {}", plan.batch_id,
                              batch.token_count(), ring.shape().max_tokens));
    return loss_mask_of(batch);
  }

 private:
  // The shard reader checks the shards' vocabulary against the model's; here the ring's.
  static ModelConfig model_of(const Ring& ring) {
    ModelConfig config;
    config.name = "the model of ring '" + ring.name() + "'";
    config.vocab_size = ring.shape().vocab_size;
    return config;
  }
  TokenSource tokens_;
};

// The caller sets each job's tokens; the plan's counts come from them.
class CallerTokens final : public JobTokens {
 public:
  BatchPlan plan(uint64_t batch_id) override { return BatchPlan{batch_id, 0, 0, 0}; }
  bool fills_labels() const override { return false; }
  bool fills_tokens() const override { return false; }
  std::vector<uint8_t> fill(const BatchPlan&, const Ring&, uint32_t) override { return {}; }
};

}  // namespace

std::unique_ptr<JobTokens> make_job_tokens(TokenOrigin origin, const Ring& ring, uint32_t target,
                                           const TokenSourceOptions& options) {
  if (origin == TokenOrigin::kCaller) return std::make_unique<CallerTokens>();
  if (ring.shape().content == PayloadContent::kModel)
    return std::make_unique<ShardTokens>(ring, target, options);
  return std::make_unique<SyntheticTokens>(ring.shape());
}

}  // namespace hsring::capi
