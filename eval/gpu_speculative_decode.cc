#include "eval/gpu_speculative_decode.h"

#include <algorithm>
#include <map>
#include <string>

#include "common/error.h"
#include "gpu/cuda_check.h"
#include "gpu/cuda_handles.h"
#include "train/cuda_dflash_trainer.h"

namespace hsring::eval {
namespace {

[[noreturn]] void bad_input(const std::string& what) { throw Error(Errc::kModelBadInput, what); }

// Documents packed back to back for one forward, positions 0.. in each.
struct Packed {
  std::vector<int32_t> tokens, positions, offsets{0};
  void add(std::span<const int32_t> doc) {
    tokens.insert(tokens.end(), doc.begin(), doc.end());
    for (size_t i = 0; i < doc.size(); ++i) positions.push_back(int32_t(i));
    offsets.push_back(int32_t(tokens.size()));
  }
  int32_t begin(size_t doc) const { return offsets[doc]; }
  int32_t end(size_t doc) const { return offsets[doc + 1]; }
};

// A device buffer that grows to hold `bytes` (contents dropped when it does).
void ensure_bytes(gpu::DeviceBuffer& buffer, size_t bytes) {
  if (buffer.size() < bytes) buffer = gpu::DeviceBuffer::allocate(bytes + bytes / 4);
}

// One prompt in flight.
struct Lane {
  std::vector<int32_t> seq;  // the prompt, then every token kept so far
  size_t prompt_length = 0, max_length = 0;
  uint32_t slot = 0;           // its place in the group, and in the KV cache
  int32_t target_row = 0;      // where its document began in the last target forward
  std::vector<int32_t> block;  // [v]: the anchor, then the drafts of positions 1 .. v - 1
  SpeculativeResult result;
  size_t anchor_row() const { return seq.size() - 1; }
  bool done() const { return seq.size() >= max_length; }
};

// Positions a sequence of these prompts can reach: the longest prompt and every new token.
uint32_t capacity_for(std::span<const std::vector<int32_t>> prompts, uint32_t max_new_tokens) {
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  return uint32_t(longest + max_new_tokens);
}

}  // namespace

struct GpuSpeculativeDecoder::Impl {
  CudaTargetModel& target;
  std::vector<int32_t> layer_ids;
  size_t block_size = 0, hidden = 0, width = 0;  // width: K * H, a row of captured layers
  uint32_t group = 0;
  std::unique_ptr<train::CudaDflashTrainer> drafter;
  gpu::Stream stream;
  gpu::DeviceBuffer captured, greedy_device, features;
  std::vector<int32_t> greedy;  // the last target forward's, on the host
  // With a KV cache (attention-only targets: cache_problem), each forward computes only the
  // new rows, and `history` keeps every lane's captured rows so far, fp32
  // [slot * capacity + position, K*H], for the drafter's context. Without one (hybrid
  // targets), each forward recomputes the whole sequence and its capture holds them.
  bool use_cache = false;
  std::unique_ptr<CudaKvCache> cache;
  gpu::DeviceBuffer history;

  size_t row_bytes() const { return width * sizeof(float); }

  // A cache (and history) for `lanes` sequences of up to `capacity` tokens.
  void prepare_cache(uint32_t lanes, uint32_t capacity) {
    if (!use_cache) return;
    if (!cache || cache->sequences() < lanes || cache->capacity() < capacity) {
      cache.reset();
      history = gpu::DeviceBuffer();
      cache = std::make_unique<CudaKvCache>(target.config(), lanes, capacity);
      history = gpu::DeviceBuffer::allocate(uint64_t(lanes) * capacity * row_bytes());
    }
  }

  // Where the captured rows of `lane`'s sequence begin, on the device.
  const std::byte* context_of(const Lane& lane) const {
    return use_cache ? history.data() + uint64_t(lane.slot) * cache->capacity() * row_bytes()
                     : captured.data() + uint64_t(lane.target_row) * row_bytes();
  }

  // Copies `count` rows of the last forward's capture from batch row `from` into `lane`'s
  // history at position `at`.
  void keep_rows(const Lane& lane, int32_t from, size_t at, size_t count) {
    std::byte* dst = history.data() + (uint64_t(lane.slot) * cache->capacity() + at) * row_bytes();
    HSRING_CUDA_CHECK(cudaMemcpyAsync(dst, captured.data() + uint64_t(from) * row_bytes(),
                                      count * row_bytes(), cudaMemcpyDeviceToDevice, stream.get()));
  }

  // One target forward over `packed`: its greedy tokens to the host (`greedy`), the captured
  // layers of every row on the device (`captured`, fp32 [T, K*H]) when `capture`.
  void target_forward(const Packed& packed, bool capture, const CachedPrefix* prefix = nullptr) {
    const size_t rows = packed.tokens.size();
    ForwardRequest request;
    request.greedy = true;
    DeviceCapture out;
    out.dtype = DType::kFP32;
    ensure_bytes(greedy_device, rows * sizeof(int32_t));
    out.greedy = greedy_device.as<int32_t>();
    if (capture) {
      request.capture_layers = layer_ids;
      ensure_bytes(captured, rows * width * sizeof(float));
      for (size_t k = 0; k < layer_ids.size(); ++k)
        out.layers.push_back({captured.as<float>() + k * hidden, width * sizeof(float)});
    }
    target.forward_device({packed.tokens, packed.positions, packed.offsets}, request, stream.get(),
                          out, prefix);
    greedy.resize(rows);
    HSRING_CUDA_CHECK(cudaMemcpyAsync(greedy.data(), greedy_device.data(), rows * sizeof(int32_t),
                                      cudaMemcpyDeviceToHost, stream.get()));
    HSRING_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  }

  // Drafts the block of every lane in `lanes` (each at its anchor, blocks of v rows) from the
  // last target forward's captured rows before the anchor. The drafter's document of a lane
  // is its sequence up to the anchor: the block's rows are built beside it.
  void draft(std::vector<Lane*>& lanes, uint32_t v) {
    Packed packed;
    std::vector<int32_t> anchors;
    for (Lane* lane : lanes) {
      const size_t s = lane->anchor_row();
      anchors.push_back(int32_t(packed.tokens.size() + s));
      packed.add(std::span<const int32_t>(lane->seq).first(s + 1));
    }
    const size_t rows = packed.tokens.size(), row_bytes = this->row_bytes();
    ensure_bytes(features, rows * row_bytes);
    // The anchor rows are never read as context, but fc runs over them: zeros, not stale bits.
    HSRING_CUDA_CHECK(cudaMemsetAsync(features.data(), 0, rows * row_bytes, stream.get()));
    for (size_t i = 0; i < lanes.size(); ++i)
      HSRING_CUDA_CHECK(cudaMemcpyAsync(features.data() + size_t(packed.begin(i)) * row_bytes,
                                        context_of(*lanes[i]), lanes[i]->anchor_row() * row_bytes,
                                        cudaMemcpyDeviceToDevice, stream.get()));
    // The drafter works on its own stream: the copies must be done before it reads them.
    HSRING_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    const std::vector<int32_t> labels(rows, -1);
    const train::DrafterBatch batch{{}, packed.tokens, packed.positions, packed.offsets, labels};
    const std::vector<int32_t> drafted = drafter->draft(batch, anchors, v, features.as<float>());
    for (size_t i = 0; i < lanes.size(); ++i) {
      Lane& lane = *lanes[i];
      lane.block.assign(1, lane.seq.back());
      lane.block.insert(lane.block.end(), drafted.begin() + std::ptrdiff_t(i * (v - 1)),
                        drafted.begin() + std::ptrdiff_t((i + 1) * (v - 1)));
    }
  }

  // A forward over each lane's document (`docs`), through the cache where there is one:
  // lane i's document continues its sequence after cached[i] positions.
  void forward_lanes(std::span<Lane* const> lanes, const Packed& docs,
                     std::span<const int32_t> cached) {
    if (!use_cache) return target_forward(docs, true);
    std::vector<int32_t> slots;
    for (const Lane* lane : lanes) slots.push_back(int32_t(lane->slot));
    const CachedPrefix prefix{cache.get(), slots, cached};
    target_forward(docs, true, &prefix);
  }

  void decode_group(std::span<Lane> lanes) {
    std::vector<Lane*> all;
    Packed prefill;
    for (Lane& lane : lanes) {
      all.push_back(&lane);
      prefill.add(lane.seq);
    }
    forward_lanes(all, prefill, std::vector<int32_t>(lanes.size(), 0));
    for (size_t i = 0; i < lanes.size(); ++i) {
      lanes[i].target_row = prefill.begin(i);
      if (use_cache) keep_rows(lanes[i], prefill.begin(i), 0, lanes[i].seq.size());
      lanes[i].seq.push_back(greedy[size_t(prefill.end(i)) - 1]);  // the first anchor
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
      Packed verify;
      std::vector<Lane*> active;
      std::vector<int32_t> cached;
      for (auto& entry : by_block_size)
        active.insert(active.end(), entry.second.begin(), entry.second.end());
      for (Lane* lane : active) {
        const auto s = int32_t(lane->anchor_row());
        std::vector<int32_t> doc;
        if (!use_cache) doc.assign(lane->seq.begin(), lane->seq.begin() + s);
        doc.insert(doc.end(), lane->block.begin(), lane->block.end());
        verify.add(doc);
        cached.push_back(use_cache ? s : 0);
      }
      for (size_t i = 0; i < active.size(); ++i)  // positions continue the cached rows
        for (int32_t t = verify.begin(i); t < verify.end(i); ++t)
          verify.positions[size_t(t)] += cached[i];
      forward_lanes(active, verify, cached);
      for (size_t i = 0; i < active.size(); ++i) {
        const int32_t anchor_at =
            verify.begin(i) + (use_cache ? 0 : int32_t(active[i]->anchor_row()));
        accept(*active[i], anchor_at, verify.begin(i));
      }
    }
  }

  // As speculative_decode: draft j stands at row s + j, and the target's token there is its
  // greedy after row s + j - 1, batch row anchor_at + j - 1. The longest agreeing prefix,
  // then the bonus token. With a cache, the kept rows' capture joins the lane's history.
  void accept(Lane& lane, int32_t anchor_at, int32_t doc_begin) {
    const size_t s = lane.anchor_row(), v = lane.block.size();
    const int32_t* after = greedy.data() + anchor_at;
    size_t accepted = 0;
    while (accepted + 1 < v && lane.block[accepted + 1] == after[accepted]) ++accepted;
    for (size_t j = 0; j < v; ++j) {
      ++lane.result.verified[j];
      if (j <= accepted) ++lane.result.accepted[j];
    }
    const size_t produced = std::min(accepted + 1, lane.max_length - s - 1);
    for (size_t j = 1; j <= accepted && !lane.done(); ++j) lane.seq.push_back(lane.block[j]);
    if (!lane.done()) lane.seq.push_back(after[accepted]);  // the bonus token
    lane.result.produced.push_back(uint32_t(produced));
    lane.target_row = doc_begin;
    if (use_cache) keep_rows(lane, anchor_at, s, accepted + 1);
  }

  void check_prompts(std::span<const std::vector<int32_t>> prompts) const {
    const uint32_t vocab = target.config().vocab_size;
    for (size_t i = 0; i < prompts.size(); ++i) {
      if (prompts[i].empty()) bad_input("prompt " + std::to_string(i) + " is empty");
      for (const int32_t t : prompts[i])
        if (t < 0 || uint32_t(t) >= vocab)
          bad_input("prompt " + std::to_string(i) + " holds token " + std::to_string(t) +
                    ", outside the target's vocabulary of " + std::to_string(vocab));
    }
  }
};

GpuSpeculativeDecoder::GpuSpeculativeDecoder(CudaTargetModel& target,
                                             const checkpoint::DflashExport& drafter,
                                             const TargetHead& head, uint32_t group)
    : impl_(std::make_unique<Impl>(Impl{target, drafter.layer_ids})) {
  const ModelConfig& tc = target.config();
  const train::DflashConfig& dc = drafter.config;
  if (dc.target_hidden != tc.hidden_size || dc.vocab_size != tc.vocab_size)
    bad_input("the drafter (hidden " + std::to_string(dc.target_hidden) + ", vocab " +
              std::to_string(dc.vocab_size) + ") does not fit target " + tc.name + " (hidden " +
              std::to_string(tc.hidden_size) + ", vocab " + std::to_string(tc.vocab_size) + ")");
  if (drafter.layer_ids.size() != dc.num_captured)
    bad_input(std::to_string(drafter.layer_ids.size()) + " layer ids for a drafter reading " +
              std::to_string(dc.num_captured) + " captured layers");
  if (group == 0) bad_input("a group of 0 prompts per forward");
  ForwardRequest request;
  request.capture_layers = drafter.layer_ids;
  validate_request(request, tc);
  Impl& m = *impl_;
  m.block_size = dc.block_size;
  m.hidden = tc.hidden_size;
  m.width = m.hidden * drafter.layer_ids.size();
  m.group = group;
  m.use_cache = cache_problem(tc).empty();
  HSRING_CUDA_CHECK(cudaSetDevice(target.gpu()));
  m.stream = gpu::make_stream();
  train::DflashTrainerOptions options;
  options.model = dc;
  options.embed = head.embed;
  options.lm_head = head.lm_head;
  m.drafter =
      std::make_unique<train::CudaDflashTrainer>(options, train::cuda::GemmPrecision::kFp32);
  const size_t total = drafter.params.size();
  m.drafter->load_state(
      {drafter.params, std::vector<float>(total, 0.0f), std::vector<float>(total, 0.0f), 0});
}

GpuSpeculativeDecoder::~GpuSpeculativeDecoder() = default;

std::vector<SpeculativeResult> GpuSpeculativeDecoder::speculative(
    std::span<const std::vector<int32_t>> prompts, uint32_t max_new_tokens) {
  Impl& m = *impl_;
  m.check_prompts(prompts);
  HSRING_CUDA_CHECK(cudaSetDevice(m.target.gpu()));
  std::vector<SpeculativeResult> results(prompts.size());
  for (size_t first = 0; first < prompts.size(); first += m.group) {
    const size_t count = std::min<size_t>(m.group, prompts.size() - first);
    std::vector<Lane> lanes(count);
    m.prepare_cache(uint32_t(count), capacity_for(prompts, max_new_tokens));
    for (size_t i = 0; i < count; ++i) {
      Lane& lane = lanes[i];
      lane.slot = uint32_t(i);
      lane.seq = prompts[first + i];
      lane.prompt_length = lane.seq.size();
      lane.max_length = lane.prompt_length + max_new_tokens;
      lane.result.verified.assign(m.block_size, 0);
      lane.result.accepted.assign(m.block_size, 0);
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
    std::span<const std::vector<int32_t>> prompts, uint32_t max_new_tokens) {
  Impl& m = *impl_;
  m.check_prompts(prompts);
  HSRING_CUDA_CHECK(cudaSetDevice(m.target.gpu()));
  std::vector<std::vector<int32_t>> outputs(prompts.size());
  for (size_t first = 0; first < prompts.size(); first += m.group) {
    const size_t count = std::min<size_t>(m.group, prompts.size() - first);
    std::vector<std::vector<int32_t>> seqs(prompts.begin() + std::ptrdiff_t(first),
                                           prompts.begin() + std::ptrdiff_t(first + count));
    m.prepare_cache(uint32_t(count), capacity_for(prompts, max_new_tokens));
    std::vector<int32_t> slots(count), cached(count, 0);
    for (size_t i = 0; i < count; ++i) slots[i] = int32_t(i);
    for (uint32_t step = 0; step < max_new_tokens; ++step) {
      // With a cache, a step after the prefill feeds each sequence its last token only.
      Packed packed;
      for (size_t i = 0; i < count; ++i) {
        const std::vector<int32_t>& seq = seqs[i];
        cached[i] = m.use_cache && step > 0 ? int32_t(seq.size()) - 1 : 0;
        packed.add(std::span<const int32_t>(seq).subspan(size_t(cached[i])));
        for (int32_t t = packed.begin(i); t < packed.end(i); ++t)
          packed.positions[size_t(t)] += cached[i];
      }
      const CachedPrefix prefix{m.cache.get(), slots, cached};
      m.target_forward(packed, false, m.use_cache ? &prefix : nullptr);
      for (size_t i = 0; i < count; ++i) seqs[i].push_back(m.greedy[size_t(packed.end(i)) - 1]);
    }
    for (size_t i = 0; i < count; ++i)
      outputs[first + i].assign(seqs[i].begin() + std::ptrdiff_t(prompts[first + i].size()),
                                seqs[i].end());
  }
  return outputs;
}

}  // namespace hsring::eval
