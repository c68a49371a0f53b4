#include "eval/gpu_speculative_decode.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>

#include "common/error.h"
#include "eval/gpu_target_runner.h"
#include "gpu/cuda_check.h"
#include "gpu/cuda_handles.h"
#include "train/cuda_dflash_trainer.h"

namespace hsring::eval {
namespace {

[[noreturn]] void bad_input(const std::string& what) { throw Error(Errc::kModel, what); }

// One prompt in flight.
struct Lane {
  std::vector<int32_t> seq;  // the prompt, then every token kept so far
  size_t prompt_length = 0, max_length = 0;
  uint32_t slot = 0;           // its place in the group, and in the KV cache
  int32_t target_row = 0;      // where its document began in the last target forward
  std::vector<int32_t> block;  // [v]: the anchor, then the drafts of positions 1 .. v - 1
  // Sampled runs: the prompt's sampler and the distributions its drafts were drawn from.
  std::optional<PromptSampler> sampler;
  std::vector<std::vector<double>> q;
  SpeculativeResult result;
  size_t anchor_row() const { return seq.size() - 1; }
  bool done() const { return seq.size() >= max_length; }
};

}  // namespace

struct GpuSpeculativeDecoder::Impl {
  GpuTargetRunner runner;
  size_t block_size = 0;
  uint32_t group = 0;
  std::unique_ptr<train::CudaDflashTrainer> drafter;
  gpu::DeviceBuffer features;       // the drafter's batch
  std::vector<float> draft_logits;  // sampled runs: the drafter's logits of the last draft()
  // With a KV cache the target computes only each step's new rows, so `history` keeps
  // every lane's captured rows so far, fp32 [slot * capacity + position, K*H], for the
  // drafter's context. Without one, each forward recomputes whole sequences and its
  // capture holds them.
  gpu::DeviceBuffer history;
  uint32_t capacity = 0;

  Impl(CudaTargetModel& target, std::vector<int32_t> layer_ids)
      : runner(target, std::move(layer_ids)) {}

  cudaStream_t stream() const { return runner.stream(); }
  size_t row_bytes() const { return runner.row_bytes(); }

  void prepare(uint32_t lanes, uint32_t lane_capacity) {
    runner.prepare(lanes, lane_capacity);
    capacity = lane_capacity;  // the history's layout; its buffer may be larger
    const uint64_t bytes = uint64_t(lanes) * lane_capacity * row_bytes();
    if (!runner.cached() || history.size() >= bytes) return;
    history = gpu::DeviceBuffer();
    history = gpu::DeviceBuffer::allocate(bytes);
  }

  // Where the captured rows of `lane`'s sequence begin, on the device.
  const std::byte* context_of(const Lane& lane) const {
    return runner.cached() ? history.data() + uint64_t(lane.slot) * capacity * row_bytes()
                           : runner.captured_row(size_t(lane.target_row));
  }

  // Copies `count` rows of the last forward's capture from batch row `from` into `lane`'s
  // history at position `at`.
  void keep_rows(const Lane& lane, int32_t from, size_t at, size_t count) {
    std::byte* dst = history.data() + (uint64_t(lane.slot) * capacity + at) * row_bytes();
    HSRING_CUDA_CHECK(cudaMemcpyAsync(dst, runner.captured_row(size_t(from)), count * row_bytes(),
                                      cudaMemcpyDeviceToDevice, stream()));
  }

  // Drafts the block of every lane in `lanes` (each at its anchor, blocks of v rows) from the
  // captured rows before the anchor. The drafter's document of a lane is its sequence up to
  // the anchor: the block's rows are built beside it.
  void draft(std::vector<Lane*>& lanes, uint32_t v) {
    PackedDocs packed;
    std::vector<int32_t> anchors;
    for (Lane* lane : lanes) {
      const size_t s = lane->anchor_row();
      anchors.push_back(int32_t(packed.tokens.size() + s));
      packed.add(std::span<const int32_t>(lane->seq).first(s + 1));
    }
    const size_t rows = packed.tokens.size();
    if (features.size() < rows * row_bytes()) {
      features = gpu::DeviceBuffer();
      features = gpu::DeviceBuffer::allocate(rows * row_bytes() * 5 / 4);
    }
    // The anchor rows are never read as context, but fc runs over them: zeros, not stale bits.
    HSRING_CUDA_CHECK(cudaMemsetAsync(features.data(), 0, rows * row_bytes(), stream()));
    for (size_t i = 0; i < lanes.size(); ++i)
      HSRING_CUDA_CHECK(cudaMemcpyAsync(features.data() + size_t(packed.begin(i)) * row_bytes(),
                                        context_of(*lanes[i]), lanes[i]->anchor_row() * row_bytes(),
                                        cudaMemcpyDeviceToDevice, stream()));
    // The drafter works on its own stream: the copies must be done before it reads them.
    HSRING_CUDA_CHECK(cudaStreamSynchronize(stream()));
    const std::vector<int32_t> labels(rows, -1);
    const train::DrafterBatch batch{{}, packed.tokens, packed.positions, packed.offsets, labels};
    const bool sampled = lanes.front()->sampler.has_value();
    const std::vector<int32_t> drafted =
        drafter->draft(batch, anchors, v, features.as<float>(), sampled ? &draft_logits : nullptr);
    const size_t vocab = runner.target().config().vocab_size;
    for (size_t i = 0; i < lanes.size(); ++i) {
      Lane& lane = *lanes[i];
      lane.block.assign(1, lane.seq.back());
      if (!sampled) {
        lane.block.insert(lane.block.end(), drafted.begin() + std::ptrdiff_t(i * (v - 1)),
                          drafted.begin() + std::ptrdiff_t((i + 1) * (v - 1)));
        continue;
      }
      // Drafts drawn from the drafter's q, as the CPU's speculative_decode draws them.
      lane.q.resize(v - 1);
      for (size_t j = 1; j < v; ++j) {
        const std::span<const float> row =
            std::span<const float>(draft_logits).subspan((i * (v - 1) + j - 1) * vocab, vocab);
        lane.block.push_back(lane.sampler->sample_draft(row, lane.anchor_row() + j, lane.q[j - 1]));
      }
    }
  }

  // A forward over each lane's document (`docs`): lane i's continues its sequence after
  // cached[i] positions (all 0 without a cache).
  // Sampled runs also copy back the logits of `logit_rows`.
  void forward_lanes(std::span<Lane* const> lanes, const PackedDocs& docs,
                     std::span<const int32_t> cached, std::span<const int32_t> logit_rows = {}) {
    std::vector<int32_t> slots;
    for (const Lane* lane : lanes) slots.push_back(int32_t(lane->slot));
    runner.forward(docs, slots, cached, true, logit_rows);
  }

  void decode_group(std::span<Lane> lanes) {
    const bool cached = runner.cached(), sampled = lanes.front().sampler.has_value();
    std::vector<Lane*> all;
    PackedDocs prefill;
    std::vector<int32_t> last_rows;
    for (Lane& lane : lanes) {
      all.push_back(&lane);
      prefill.add(lane.seq);
      if (sampled) last_rows.push_back(prefill.end(prefill.size() - 1) - 1);
    }
    forward_lanes(all, prefill, std::vector<int32_t>(lanes.size(), 0), last_rows);
    for (size_t i = 0; i < lanes.size(); ++i) {
      Lane& lane = lanes[i];
      lane.target_row = prefill.begin(i);
      if (cached) keep_rows(lane, prefill.begin(i), 0, lane.seq.size());
      // The first anchor.
      lane.seq.push_back(sampled
                             ? lane.sampler->sample_target(runner.logits_row(i), lane.seq.size())
                             : runner.greedy()[size_t(prefill.end(i)) - 1]);
    }
    for (;;) {
      // Blocks of one size draft together: all of them but a prompt's last few.
      std::map<uint32_t, std::vector<Lane*>> by_block_size;
      for (Lane& lane : lanes)
        if (!lane.done())
          by_block_size[uint32_t(std::min(block_size, lane.max_length - lane.anchor_row()))]
              .push_back(&lane);
      if (by_block_size.empty()) return;
      for (auto& [v, group_lanes] : by_block_size) draft(group_lanes, v);

      // One forward verifies every block: a lane's document is its sequence then its drafts
      // (with a cache: its anchor and drafts, continuing the cached rows before the anchor).
      PackedDocs verify;
      std::vector<Lane*> active;
      std::vector<int32_t> before, logit_rows;
      for (auto& entry : by_block_size)
        active.insert(active.end(), entry.second.begin(), entry.second.end());
      for (Lane* lane : active) {
        const auto s = int32_t(lane->anchor_row());
        std::vector<int32_t> doc;
        if (!cached) doc.assign(lane->seq.begin(), lane->seq.begin() + s);
        doc.insert(doc.end(), lane->block.begin(), lane->block.end());
        before.push_back(cached ? s : 0);
        verify.add(doc, before.back());
        // A sampled block's target distributions: its anchor's row and its drafts'.
        const int32_t anchor_at = verify.end(verify.size() - 1) - int32_t(lane->block.size());
        for (size_t j = 0; sampled && j < lane->block.size(); ++j)
          logit_rows.push_back(anchor_at + int32_t(j));
      }
      forward_lanes(active, verify, before, logit_rows);
      size_t logits_at = 0;  // the first row of logits() of each lane's block
      for (size_t i = 0; i < active.size(); ++i) {
        const int32_t anchor_at = verify.begin(i) + (cached ? 0 : int32_t(active[i]->anchor_row()));
        accept(*active[i], anchor_at, verify.begin(i), logits_at);
        if (sampled) logits_at += active[i]->block.size();
      }
    }
  }

  // As speculative_decode: draft j stands at row s + j, and the target's token there is its
  // greedy after row s + j - 1, batch row anchor_at + j - 1. The longest agreeing prefix,
  // then the bonus token; a sampled block is settled by PromptSampler::verify_block over
  // its logits, rows logits_at .. of the runner's logits(). With a cache, the kept rows'
  // capture joins the lane's history.
  void accept(Lane& lane, int32_t anchor_at, int32_t doc_begin, size_t logits_at) {
    const size_t s = lane.anchor_row(), v = lane.block.size();
    size_t accepted = 0;
    int32_t next = 0;
    if (lane.sampler) {
      const BlockVerdict verdict =
          lane.sampler->verify_block(s, std::span<const int32_t>(lane.block).subspan(1), lane.q,
                                     runner.logits_row(logits_at, v));
      accepted = verdict.accepted;
      next = verdict.next;
    } else {
      const int32_t* after = runner.greedy().data() + anchor_at;
      while (accepted + 1 < v && lane.block[accepted + 1] == after[accepted]) ++accepted;
      next = after[accepted];
    }
    for (size_t j = 0; j < v; ++j) {
      ++lane.result.verified[j];
      if (j <= accepted) ++lane.result.accepted[j];
    }
    const size_t produced = std::min(accepted + 1, lane.max_length - s - 1);
    for (size_t j = 1; j <= accepted && !lane.done(); ++j) lane.seq.push_back(lane.block[j]);
    if (!lane.done()) lane.seq.push_back(next);  // the bonus token
    lane.result.produced.push_back(uint32_t(produced));
    lane.target_row = doc_begin;
    if (runner.cached()) keep_rows(lane, anchor_at, s, accepted + 1);
  }

  void check_prompts(std::span<const std::vector<int32_t>> prompts) const {
    const uint32_t vocab = runner.target().config().vocab_size;
    for (size_t i = 0; i < prompts.size(); ++i) {
      if (prompts[i].empty()) bad_input(fmt::format("prompt {} is empty", i));
      for (const int32_t t : prompts[i])
        if (t < 0 || uint32_t(t) >= vocab)
          bad_input(fmt::format("prompt {} holds token {}, outside the target's vocabulary of {}",
                                i, t, vocab));
    }
  }
};

GpuSpeculativeDecoder::GpuSpeculativeDecoder(CudaTargetModel& target,
                                             const checkpoint::DflashExport& drafter,
                                             const TargetHead& head, uint32_t group) {
  const ModelConfig& tc = target.config();
  const train::DflashConfig& dc = drafter.config;
  check_drafter_fits(tc, drafter);
  if (drafter.layer_ids.size() != dc.num_captured)
    bad_input(fmt::format("{} layer ids for a drafter reading {} captured layers",
                          drafter.layer_ids.size(), dc.num_captured));
  if (group == 0) bad_input("a group of 0 prompts per forward");
  ForwardRequest request;
  request.capture_layers = drafter.layer_ids;
  validate_request(request, tc);
  impl_ = std::make_unique<Impl>(target, drafter.layer_ids);
  Impl& m = *impl_;
  m.block_size = dc.block_size;
  m.group = group;
  train::DflashTrainerOptions options;
  options.model = dc;
  options.embed = head.embed;
  options.lm_head = head.lm_head;
  m.drafter = std::make_unique<train::CudaDflashTrainer>(options, train::GemmPrecision::kFp32);
  const size_t total = drafter.params.size();
  m.drafter->load_state(
      {drafter.params, std::vector<float>(total, 0.0f), std::vector<float>(total, 0.0f), 0});
}

GpuSpeculativeDecoder::~GpuSpeculativeDecoder() = default;

std::vector<SpeculativeResult> GpuSpeculativeDecoder::speculative(
    std::span<const std::vector<int32_t>> prompts, uint32_t max_new_tokens,
    const SamplingOptions& sampling) {
  Impl& m = *impl_;
  m.check_prompts(prompts);
  HSRING_CUDA_CHECK(cudaSetDevice(m.runner.target().gpu()));
  std::vector<SpeculativeResult> results(prompts.size());
  for (size_t first = 0; first < prompts.size(); first += m.group) {
    const size_t count = std::min<size_t>(m.group, prompts.size() - first);
    m.prepare(uint32_t(count), capacity_for(prompts.subspan(first, count), max_new_tokens));
    std::vector<Lane> lanes(count);
    for (size_t i = 0; i < count; ++i) {
      Lane& lane = lanes[i];
      lane.slot = uint32_t(i);
      lane.seq = prompts[first + i];
      lane.prompt_length = lane.seq.size();
      lane.max_length = lane.prompt_length + max_new_tokens;
      lane.result.verified.assign(m.block_size, 0);
      lane.result.accepted.assign(m.block_size, 0);
      if (!sampling.greedy()) lane.sampler.emplace(sampling, first + i);
    }
    if (max_new_tokens > 0) m.decode_group(lanes);
    for (size_t i = 0; i < count; ++i) {
      Lane& lane = lanes[i];
      lane.result.tokens.assign(lane.seq.begin() + std::ptrdiff_t(lane.prompt_length),
                                lane.seq.end());
      results[first + i] = std::move(lane.result);
    }
  }
  return results;
}

std::vector<std::vector<int32_t>> GpuSpeculativeDecoder::greedy(
    std::span<const std::vector<int32_t>> prompts, uint32_t max_new_tokens,
    const SamplingOptions& sampling) {
  Impl& m = *impl_;
  m.check_prompts(prompts);
  HSRING_CUDA_CHECK(cudaSetDevice(m.runner.target().gpu()));
  return m.runner.greedy_decode(prompts, max_new_tokens, {}, m.group, sampling);
}

}  // namespace hsring::eval
