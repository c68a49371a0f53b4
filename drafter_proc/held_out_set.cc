#include "drafter_proc/held_out_set.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/error.h"
#include "data/batch_index.h"
#include "data/corpus.h"
#include "data/default_corpus.h"
#include "data/held_out.h"
#include "data/token_batch.h"
#include "model/cpu_target_model.h"
#include "model/float_convert.h"

namespace hsring {
namespace {

// What a slot of `dtype` makes of an fp32 value.
float round_to(DType dtype, float value) {
  if (dtype == DType::kBF16) return bf16_to_float(float_to_bf16(value));
  if (dtype == DType::kFP16) return fp16_to_float(float_to_fp16(value));
  return value;
}

}  // namespace

HeldOutSet HeldOutSet::build(const HeldOutSetOptions& options) {
  const data::Corpus corpus = data::open_token_data(options.data_dir);
  std::vector<std::vector<uint64_t>> offsets;
  if (options.held_out_only) {
    if (data::held_out_document_count(corpus.doc_count()) == 0)
      throw Error(Errc::kData,
                  fmt::format("corpus {} has {} documents, too few to hold any out (one in {} "
                              "is, from 16 on)",
                              corpus.dir(), corpus.doc_count(), data::kHeldOutFraction));
    offsets = data::held_out_doc_offsets(corpus);
  } else {
    for (const data::ShardInfo& shard : corpus.shards()) offsets.push_back(shard.doc_offsets);
  }
  const data::BatchIndex index(offsets, {.max_tokens = options.max_tokens, .seed = 0});
  const auto target = open_cpu_model(options.target_model, options.model_seed, {options.threads});
  ForwardRequest request;
  request.capture_layers = options.layer_ids;
  request.greedy = true;
  validate_request(request, target->config());
  ForwardOutput out;
  const size_t h = target->config().hidden_size, k = options.layer_ids.size();

  HeldOutSet set;
  const uint64_t count = std::min<uint64_t>(options.max_batches, index.batches_per_epoch());
  for (uint64_t id = 0; id < count; ++id) {
    const data::TokenBatch b = data::read_batch(corpus, index, id);
    target->forward({b.tokens, b.positions, b.doc_offsets}, request, out);
    Batch batch{{}, b.tokens, b.positions, b.doc_offsets, out.greedy};
    data::mask_target_labels(b, batch.labels.data());  // as a target writes the slot's labels
    batch.features.resize(b.tokens.size() * k * h);
    for (size_t r = 0; r < b.tokens.size(); ++r)
      for (size_t l = 0; l < k; ++l)
        for (size_t c = 0; c < h; ++c)
          batch.features[(r * k + l) * h + c] = round_to(options.dtype, out.captured[l][r * h + c]);
    set.batches_.push_back(std::move(batch));
  }
  return set;
}

std::optional<HeldOutStats> HeldOutSet::evaluate(train::DrafterTrainer& trainer) const {
  double loss = 0, accepted = 0;
  uint64_t counted = 0, agreed = 0, blocks = 0;
  for (const Batch& b : batches_) {
    const std::optional<train::LossStats> s =
        trainer.evaluate_held_out({b.features, b.tokens, b.positions, b.doc_offsets, b.labels});
    if (!s) return std::nullopt;
    loss += s->loss * double(s->counted);
    counted += s->counted;
    agreed += s->agreed;
    const uint64_t batch_blocks = s->accepted_at.empty() ? 0 : s->accepted_at[0];
    accepted += (s->acceptance_length - 1) * double(batch_blocks);
    blocks += batch_blocks;
  }
  HeldOutStats stats;
  stats.loss = counted ? loss / double(counted) : 0;
  stats.agreement = counted ? double(agreed) / double(counted) : 0;
  stats.acceptance_length = blocks ? 1 + accepted / double(blocks) : 0;
  return stats;
}

uint64_t HeldOutSet::tokens() const {
  uint64_t n = 0;
  for (const Batch& b : batches_) n += b.tokens.size();
  return n;
}

}  // namespace hsring
