#include "target_proc/token_source.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/error.h"
#include "common/log.h"
#include "data/default_corpus.h"
#include "data/held_out.h"

namespace hsring {
namespace {

// A --data corpus's held-out documents are never read (data/held_out.h); the built-in
// corpus's training part has none left to hold out.
std::vector<std::vector<uint64_t>> trained_documents(const data::Corpus& corpus,
                                                     const std::string& data_dir) {
  if (data_dir.empty()) {
    std::vector<std::vector<uint64_t>> all;
    for (const data::ShardInfo& shard : corpus.shards()) all.push_back(shard.doc_offsets);
    return all;
  }
  return data::training_doc_offsets(corpus);
}

}  // namespace

TokenSource::TokenSource(const TokenSourceOptions& options, const ModelConfig& model,
                         uint32_t max_tokens, uint32_t target, uint32_t num_targets)
    : options_(options),
      corpus_(data::open_token_data(options.data_dir)),
      index_(trained_documents(corpus_, options.data_dir),
             data::PackOptions{max_tokens, options.data_seed}),
      target_(target),
      num_targets_(num_targets) {
  if (std::string problem = data::vocabulary_problem(corpus_, model.vocab_size, model.name);
      !problem.empty())
    throw Error(Errc::kModel, problem);
  log_line(fmt::format(
      "data {}: {} tokens, {} documents ({} held out), {} batches of up to {} tokens per epoch",
      corpus_.dir(), corpus_.token_count(), corpus_.doc_count(),
      options.data_dir.empty() ? 0 : data::held_out_document_count(corpus_.doc_count()),
      index_.batches_per_epoch(), max_tokens));
}

TokenSource::~TokenSource() = default;

const data::ReaderStats* TokenSource::reader_stats() const {
  return reader_ ? &reader_->stats() : nullptr;
}

uint64_t TokenSource::data_id(uint64_t batch_id) const {
  return (batch_id + options_.data_offset) * options_.nnodes + options_.node_rank;
}

BatchPlan TokenSource::plan(uint64_t batch_id) const {
  const data::BatchRef ref = index_.batch(data_id(batch_id));
  return BatchPlan{batch_id, ref.token_count, uint32_t(ref.pieces.size()), ref.length_bucket};
}

data::TokenBatch TokenSource::fetch(uint64_t batch_id) {
  // Fresh batches come in shard order: the read-ahead serves them. An adopted batch (or
  // any other out-of-order id) is read directly and leaves the read-ahead alone.
  const uint64_t id = data_id(batch_id);
  const uint64_t stride = uint64_t(num_targets_) * options_.nnodes;  // this target's next
  if (!reader_ && batch_id % num_targets_ == target_) {
    data::ReaderOptions reader_options;
    reader_options.depth = std::max(1u, options_.read_ahead);
    reader_ = std::make_unique<data::TokenReader>(corpus_, index_, data::strided_ids(id, stride),
                                                  reader_options);
    reader_next_ = id;
  }
  if (reader_ && id == reader_next_) {
    std::optional<data::TokenBatch> batch = reader_->next();
    reader_next_ += stride;
    if (batch && batch->batch_id == id) return std::move(*batch);
  }
  return data::read_batch(corpus_, index_, id);
}

}  // namespace hsring
