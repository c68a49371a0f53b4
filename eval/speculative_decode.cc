#include "eval/speculative_decode.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "common/error.h"
#include "data/token_batch.h"

namespace hsring::eval {
namespace {

// One document of `tokens`, positions 0.., through the target.
void run_target(TargetModel& target, std::span<const int32_t> tokens, const ForwardRequest& request,
                ForwardOutput& out) {
  std::vector<int32_t> positions(tokens.size());
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = int32_t(i);
  const std::vector<int32_t> offsets = {0, int32_t(tokens.size())};
  target.forward({tokens, positions, offsets}, request, out);
}

[[noreturn]] void bad_input(const std::string& what) { throw Error(Errc::kModel, what); }

// The drafter's batch for the anchor at the last row s of `seq`: rows [0, s) context (the
// captured layers of the target forward `out`), row s the anchor, B - 1 rows after it so
// the block fits its document (their features and tokens are never read by the block).
struct DraftScratch {
  std::vector<float> features;
  std::vector<int32_t> tokens, positions, labels, offsets, anchors;
};

void draft_block(train::DflashModel& drafter, const ForwardOutput& out,
                 std::span<const int32_t> seq, size_t k, size_t hidden, DraftScratch& d) {
  const train::DflashConfig& dc = drafter.config();
  const size_t s = seq.size() - 1, rows = s + dc.block_size;
  d.features.assign(rows * k * hidden, 0.0f);
  for (size_t t = 0; t < s; ++t)
    for (size_t l = 0; l < k; ++l)
      std::copy_n(out.captured[l].data() + t * hidden, hidden,
                  d.features.data() + (t * k + l) * hidden);
  d.tokens.assign(seq.begin(), seq.end());
  d.tokens.resize(rows, dc.mask_token_id);
  d.positions.resize(rows);
  for (size_t i = 0; i < rows; ++i) d.positions[i] = int32_t(i);
  d.labels.assign(rows, kIgnoreLabel);
  d.offsets = {0, int32_t(rows)};
  d.anchors = {int32_t(s)};
  drafter.forward({d.features, d.tokens, d.positions, d.offsets, d.labels, d.anchors});
}

// The drafter's logits of block positions 1 .. v - 1 of its last forward (one block),
// [(v - 1) * V]: its final hidden states times `lm_head`, summed in double.
std::vector<float> draft_logits(const train::DflashModel& drafter, std::span<const float> lm_head) {
  const size_t hidden = drafter.config().width(), vocab = lm_head.size() / hidden;
  const auto final_hidden = drafter.block_hidden();
  const size_t v = final_hidden.size() / hidden;
  std::vector<float> logits((v - 1) * vocab);
  for (size_t j = 1; j < v; ++j)
    for (size_t t = 0; t < vocab; ++t) {
      double dot = 0;
      for (size_t c = 0; c < hidden; ++c)
        dot += double(final_hidden[j * hidden + c]) * double(lm_head[t * hidden + c]);
      logits[(j - 1) * vocab + t] = float(dot);
    }
  return logits;
}

bool is_stop(std::span<const int32_t> stop_tokens, int32_t token) {
  return std::find(stop_tokens.begin(), stop_tokens.end(), token) != stop_tokens.end();
}

}  // namespace

void check_drafter_fits(const ModelConfig& target, const checkpoint::DflashExport& drafter) {
  const train::DflashConfig& c = drafter.config;
  if (c.target_hidden != target.hidden_size)
    bad_input(fmt::format(
        "the drafter's hidden_size {} is not target {}'s {}: it was trained against another model",
        c.target_hidden, target.name, target.hidden_size));
  if (c.vocab_size != target.vocab_size)
    bad_input(fmt::format("the drafter's vocab_size {} is not target {}'s {}", c.vocab_size,
                          target.name, target.vocab_size));
  if (drafter.num_target_layers != target.num_layers)
    bad_input(fmt::format("the drafter's num_target_layers {} is not target {}'s {} layers",
                          drafter.num_target_layers, target.name, target.num_layers));
}

std::vector<int32_t> greedy_decode(TargetModel& target, std::span<const int32_t> prompt,
                                   uint32_t max_new_tokens, std::span<const int32_t> stop_tokens) {
  if (prompt.empty()) bad_input("greedy decoding needs a non-empty prompt");
  std::vector<int32_t> seq(prompt.begin(), prompt.end());
  ForwardRequest request;
  request.greedy = true;
  ForwardOutput out;
  for (uint32_t i = 0; i < max_new_tokens; ++i) {
    run_target(target, seq, request, out);
    seq.push_back(out.greedy.back());
    if (is_stop(stop_tokens, seq.back())) break;
  }
  return std::vector<int32_t>(seq.begin() + std::ptrdiff_t(prompt.size()), seq.end());
}

std::vector<int32_t> sample_decode(TargetModel& target, std::span<const int32_t> prompt,
                                   uint32_t max_new_tokens, const PromptSampler& sampler,
                                   std::span<const int32_t> stop_tokens) {
  if (prompt.empty()) bad_input("sampling needs a non-empty prompt");
  const size_t vocab = target.config().vocab_size;
  std::vector<int32_t> seq(prompt.begin(), prompt.end());
  ForwardRequest request;
  request.greedy = false;
  request.logits = true;
  ForwardOutput out;
  for (uint32_t i = 0; i < max_new_tokens; ++i) {
    run_target(target, seq, request, out);
    const std::span<const float> last(out.logits.data() + (seq.size() - 1) * vocab, vocab);
    seq.push_back(sampler.sample_target(last, seq.size()));
    if (is_stop(stop_tokens, seq.back())) break;
  }
  return std::vector<int32_t>(seq.begin() + std::ptrdiff_t(prompt.size()), seq.end());
}

bool is_greedy_continuation(TargetModel& target, std::span<const int32_t> prompt,
                            std::span<const int32_t> output) {
  if (prompt.empty()) bad_input("a greedy check needs a non-empty prompt");
  if (output.empty()) return true;
  std::vector<int32_t> seq(prompt.begin(), prompt.end());
  seq.insert(seq.end(), output.begin(), output.end() - 1);
  ForwardRequest request;
  request.greedy = true;
  ForwardOutput out;
  run_target(target, seq, request, out);
  for (size_t i = 0; i < output.size(); ++i)
    if (out.greedy[prompt.size() - 1 + i] != output[i]) return false;
  return true;
}

SpeculativeResult speculative_decode(TargetModel& target, train::DflashModel& drafter,
                                     std::span<const int32_t> layer_ids,
                                     std::span<const int32_t> prompt, uint32_t max_new_tokens,
                                     const DraftSampling* sampling) {
  const ModelConfig& tc = target.config();
  const train::DflashConfig& dc = drafter.config();
  if (prompt.empty()) bad_input("speculative decoding needs a non-empty prompt");
  if (dc.target_hidden != tc.hidden_size || dc.vocab_size != tc.vocab_size)
    bad_input(
        fmt::format("the drafter (hidden {}, vocab {}) does not fit target {} (hidden {}, "
                    "vocab {})",
                    dc.target_hidden, dc.vocab_size, tc.name, tc.hidden_size, tc.vocab_size));
  if (layer_ids.size() != dc.num_captured)
    bad_input(fmt::format("{} layer ids for a drafter reading {} captured layers", layer_ids.size(),
                          dc.num_captured));
  const size_t bs = dc.block_size, hidden = tc.hidden_size, k = layer_ids.size();
  const size_t max_length = prompt.size() + max_new_tokens, vocab = tc.vocab_size;
  if (sampling && sampling->lm_head.size() != vocab * hidden)
    bad_input("the LM head is not [vocab, hidden]");

  SpeculativeResult result;
  result.verified.assign(bs, 0);
  result.accepted.assign(bs, 0);
  if (max_new_tokens == 0) return result;

  ForwardRequest request;
  request.capture_layers.assign(layer_ids.begin(), layer_ids.end());
  request.greedy = !sampling;
  request.logits = sampling != nullptr;
  validate_request(request, tc);
  ForwardOutput out;
  // Target row r's logits (their distribution is the token at row r + 1's).
  const auto logits_from = [&](size_t r, size_t rows) {
    return std::span<const float>(out.logits).subspan(r * vocab, rows * vocab);
  };

  std::vector<int32_t> seq(prompt.begin(), prompt.end());
  run_target(target, seq, request, out);
  // The first anchor.
  seq.push_back(sampling
                    ? sampling->sampler.sample_target(logits_from(seq.size() - 1, 1), seq.size())
                    : out.greedy.back());

  DraftScratch scratch;
  std::vector<int32_t> block, drafts;
  std::vector<std::vector<double>> q;
  // The last blocks are cut to the v rows left before max_length (v >= 2: a token is left
  // to produce), drafted and verified at that length, as the reference's dflash_generate
  // does; the drafter's own block size is restored whatever happens.
  struct RestoreBlockSize {
    train::DflashModel& drafter;
    uint32_t block_size;
    ~RestoreBlockSize() { drafter.set_block_size(block_size); }
  } restore{drafter, uint32_t(bs)};
  while (seq.size() < max_length) {
    const size_t s = seq.size() - 1;  // the anchor's row
    const size_t v = std::min(bs, max_length - s);
    if (v != drafter.config().block_size) drafter.set_block_size(uint32_t(v));
    draft_block(drafter, out, seq, k, hidden, scratch);
    // [v]: position j's draft at index j (its argmax, or its sample from q[j - 1]).
    if (sampling) {
      const std::vector<float> logits = draft_logits(drafter, sampling->lm_head);
      drafts.assign(1, seq.back());
      q.resize(v - 1);
      for (size_t j = 1; j < v; ++j)
        drafts.push_back(sampling->sampler.sample_draft(
            std::span<const float>(logits).subspan((j - 1) * vocab, vocab), s + j, q[j - 1]));
    } else {
      const auto predicted = drafter.predictions();
      drafts.assign(predicted.begin(), predicted.end());
    }

    // Verify the anchor and its v - 1 drafts in one forward over everything so far.
    block.assign(seq.begin(), seq.end());
    for (size_t j = 1; j < v; ++j) block.push_back(drafts[j]);
    run_target(target, block, request, out);
    // Draft j stands at row s + j; the target's token there is its greedy after row s + j - 1.
    size_t accepted = 0;
    int32_t next = 0;  // the token after the accepted drafts: the bonus
    if (sampling) {
      const BlockVerdict verdict = sampling->sampler.verify_block(
          s, std::span<const int32_t>(drafts).subspan(1), q, logits_from(s, v));
      accepted = verdict.accepted;
      next = verdict.next;
    } else {
      while (accepted + 1 < v && drafts[accepted + 1] == out.greedy[s + accepted]) ++accepted;
      next = out.greedy[s + accepted];
    }
    for (size_t j = 0; j < v; ++j) {
      ++result.verified[j];
      if (j <= accepted) ++result.accepted[j];
    }
    const size_t produced = std::min(accepted + 1, max_length - s - 1);
    for (size_t j = 1; j <= accepted && seq.size() < max_length; ++j) seq.push_back(drafts[j]);
    if (seq.size() < max_length) seq.push_back(next);  // the bonus token
    result.produced.push_back(uint32_t(produced));
  }
  result.tokens.assign(seq.begin() + std::ptrdiff_t(prompt.size()), seq.end());
  return result;
}

DraftedBlock first_block(TargetModel& target, train::DflashModel& drafter,
                         std::span<const int32_t> layer_ids, std::span<const int32_t> prompt,
                         std::span<const float> lm_head) {
  const ModelConfig& tc = target.config();
  const train::DflashConfig& dc = drafter.config();
  if (prompt.empty()) bad_input("drafting a block needs a non-empty prompt");
  if (dc.target_hidden != tc.hidden_size || dc.vocab_size != tc.vocab_size ||
      layer_ids.size() != dc.num_captured)
    bad_input("the drafter does not fit target " + tc.name);
  const size_t hidden = tc.hidden_size, vocab = tc.vocab_size, bs = dc.block_size;
  if (lm_head.size() != vocab * hidden) bad_input("the LM head is not [vocab, hidden]");
  ForwardRequest request;
  request.capture_layers.assign(layer_ids.begin(), layer_ids.end());
  request.greedy = true;
  validate_request(request, tc);
  ForwardOutput out;
  std::vector<int32_t> seq(prompt.begin(), prompt.end());
  run_target(target, seq, request, out);
  seq.push_back(out.greedy.back());

  DraftScratch scratch;
  draft_block(drafter, out, seq, layer_ids.size(), hidden, scratch);
  DraftedBlock result;
  result.context_length = uint32_t(prompt.size());
  result.anchor = seq.back();
  const auto drafts = drafter.predictions();
  result.drafts.assign(drafts.begin() + 1, drafts.begin() + std::ptrdiff_t(bs));
  result.logits = draft_logits(drafter, lm_head);
  return result;
}

}  // namespace hsring::eval
