// What lies in the ring segment, byte for byte: the header, the process table, the
// per-target progress records, the batch ledger, the slot headers and the slot payloads.
// Every structure here is shared between processes: plain data plus lock-free atomics.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/dtype.h"
#include "common/ignore_label.h"
#include "shm/slot_hints.h"
#include "shm/slot_state.h"

namespace hsring {

inline constexpr uint64_t kRingMagic = 0x0001474E49525348ull;  // bytes "HSRING\1\0"
// 2: RingShape.content, vocab_size; 3: NCCL id; 4: TrainingProgress.acceptance_ema;
// 5: RingHeader.free_hints, ready_hints (claim hints, slot_hints.h); 6: SlotHeader's
// copy ticket and event (early publish, shm/copy_ticket.h), TargetProgress.returned;
// 7: RingShape.ordered_claims, RingHeader.ordered_floor (shm/ordered_claims.h)
inline constexpr uint32_t kRingVersion = 7;
inline constexpr uint32_t kMaxCapturedLayers = 16;
inline constexpr uint32_t kMaxProcesses = 64;  // targets + drafters; < SlotState::kMaxOwners
inline constexpr uint32_t kMaxSlots = 4096;
static_assert(kMaxSlots <= kHintWords * 64, "one hint bit per slot");
inline constexpr uint64_t kRegionAlign = 4096;  // every payload region starts on a page

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be lock-free");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared atomics must be lock-free");

// What the slots carry: verifiable synthetic batches, or a target model's captured
// layers over real tokens (drafters check the former element by element; they train on
// the latter).
enum class PayloadContent : uint32_t { kSynthetic = 0, kModel = 1 };
const char* to_string(PayloadContent content);

// What the ring is for; chosen at creation, the layout follows from it.
struct RingShape {
  uint32_t slot_count = 16;
  uint32_t max_tokens = 512;  // tokens per slot
  uint32_t hidden_size = 256;
  uint32_t num_layers = 5;  // K captured layers
  DType dtype = DType::kBF16;
  uint32_t split_layers = 1;  // 1: K regions [T, H]; 0: one region [T, K*H]
  uint32_t num_targets = 2;
  uint32_t num_drafters = 1;
  uint32_t hs_min_ready = 1;
  PayloadContent content = PayloadContent::kSynthetic;
  // kModel: every token lies in [0, vocab_size), every label too or is kIgnoreLabel
  uint32_t vocab_size = 0;
  // 1: drafters consume batch ids in order and targets run at most slot_count ids ahead
  // of the oldest unconsumed one (`hsring run --deterministic`, shm/ordered_claims.h);
  // 0: drafters claim a random READY slot. 1 needs a batch_limit (the ledger tracks it).
  uint32_t ordered_claims = 0;
  int32_t layer_ids[kMaxCapturedLayers] = {};
  uint64_t batch_limit = 0;             // 0: targets produce until stopped
  uint64_t ledger_capacity = 1u << 20;  // batch ids accounted in the ledger
  // kModel: ring batch id X carries data batch X + data_offset (a resumed run continues
  // the data where its checkpoint was, while its ring and ledger count from 0). A
  // multiple of num_targets, so each target keeps its own residue of data batches.
  uint64_t data_offset = 0;
};

// Offsets of the regions inside one slot's payload, from the payload's start.
struct SlotLayout {
  uint64_t layer_offset[kMaxCapturedLayers];  // split: one per layer; else [0] holds [T, K*H]
  uint64_t layer_bytes;                       // bytes of one [T, H] layer region
  uint64_t tokens_offset;                     // int32[max_tokens]
  uint64_t positions_offset;                  // int32[max_tokens]
  uint64_t doc_offsets_offset;                // int32[max_tokens + 1], cu_seqlens style
  uint64_t labels_offset;                     // int32[max_tokens]
  uint64_t stride;                            // bytes from one slot's payload to the next
};

// Offsets of the segment's regions from its start; derived from RingShape alone.
struct RingLayout {
  uint64_t process_table_offset;
  uint64_t target_progress_offset;
  uint64_t ledger_offset;
  uint64_t slot_headers_offset;
  uint64_t payload_offset;
  uint64_t total_size;
  SlotLayout slot;
};

enum class RunState : uint32_t {
  kRunning = 0,
  kDraining = 1,  // producers stop after what they hold; consumers take any READY slot
  kStopped = 2,
};

// The drafter group's training, published by drafter 0 after each optimizer step for
// status, the progress line and the summary. Relaxed: statistics, read without ordering
// needs; floats are stored as their bits.
struct TrainingProgress {
  std::atomic<uint64_t> steps;          // optimizer steps applied (continues across resumes)
  std::atomic<uint64_t> tokens;         // label positions trained on, this run
  std::atomic<uint32_t> first_loss;     // float: the loss of this run's first step
  std::atomic<uint32_t> last_loss;      // float: the last step's loss
  std::atomic<uint32_t> loss_ema;       // float: loss, exponential average over ~20 steps
  std::atomic<uint32_t> agreement_ema;  // float: top-1 agreement with the target, same average
  // float: the DFlash drafter's teacher-forced acceptance length (tau) on each batch before
  // it trains on it, same average; 0 for an objective that does not draft.
  std::atomic<uint32_t> acceptance_ema;
  std::atomic<uint32_t> step_us;          // the last step's wall time
  std::atomic<uint32_t> lr;               // float: the last step's learning rate
  std::atomic<uint64_t> checkpoint_step;  // the step of the newest durable checkpoint

  // Readers' view (relaxed, like the writes).
  bool started() const { return tokens.load(std::memory_order_relaxed) > 0; }
  // memcpy, not std::bit_cast: CUDA sources include this header as C++17.
  static float value(const std::atomic<uint32_t>& bits) {
    const uint32_t raw = bits.load(std::memory_order_relaxed);
    float f;
    std::memcpy(&f, &raw, sizeof f);
    return f;
  }
};

// The segment's first bytes. Immutable fields are written once by the creator before
// `magic` is stored with release; attachers check magic first with acquire.
struct alignas(64) RingHeader {
  std::atomic<uint64_t> magic;
  uint32_t version;
  uint32_t header_size;
  uint32_t creator_uid;
  uint32_t reserved0;
  uint64_t created_unix_ns;
  RingShape shape;
  RingLayout layout;

  // Futex words (32-bit, shared, never FUTEX_PRIVATE): bumped on every change that may
  // let a waiter proceed, so a waiter that read the old value never sleeps through it.
  alignas(64) std::atomic<uint32_t> ready_futex;  // a slot became READY
  std::atomic<uint32_t> ready_waiters;
  alignas(64) std::atomic<uint32_t> free_futex;  // a slot became FREE
  std::atomic<uint32_t> free_waiters;

  alignas(64) std::atomic<uint64_t> publish_seq;  // last publish sequence number handed out
  std::atomic<uint32_t> run_state;                // RunState
  std::atomic<int32_t> launcher_pid;              // 0 when no launcher supervises the ring
  std::atomic<uint64_t> slots_recovered;          // recoveries of dead owners' slots
  std::atomic<uint64_t> slots_adopted;            // WRITING slots re-produced by a successor
  // Ordered claims: every batch id below it was consumed (advanced by consumers,
  // shm/ordered_claims.h); 0 and unused otherwise.
  std::atomic<uint64_t> ordered_floor;

  alignas(64) TrainingProgress training;

  // The GPU drafter group's NCCL unique id, written only by drafter 0's incarnation
  // `nccl_epoch` (shm/nccl_rendezvous.h has the protocol and the orderings).
  alignas(64) std::atomic<uint32_t> nccl_epoch;
  uint32_t reserved1;
  std::atomic<uint64_t> nccl_id[16];  // 128 bytes: sizeof(ncclUniqueId)

  // Hints of the FREE and READY slots, one bit per slot (slot_hints.h): set after the CAS
  // that enters the phase, cleared after the CAS that leaves it; repaired by recovery.
  SlotHintBits free_hints;
  SlotHintBits ready_hints;
};

enum class Role : uint32_t { kNone = 0, kTarget = 1, kDrafter = 2 };
const char* to_string(Role role);

enum class ProcessState : uint32_t {
  kEmpty = 0,     // never started
  kStarting = 1,  // attached, recovering its previous epoch
  kRunning = 2,
  kDraining = 3,
  kExited = 4,  // left cleanly
};
const char* to_string(ProcessState state);

// Pipeline stages timed into each process's counters.
enum class Stage : uint32_t {
  kTargetForward,
  kTargetEnqueue,
  kTargetCopy,
  kTargetPublishWait,
  kDrafterClaimWait,
  kDrafterH2D,
  kDrafterNoise,
  kDrafterVerify,
  kDrafterStep,
  kCount
};
inline constexpr uint32_t kStageCount = uint32_t(Stage::kCount);
const char* to_string(Stage stage);

// The stages that are a worker's work, for busy fractions: a target's forward, a drafter's
// copy out of the ring (H2D, noise, verify) and its step. Waits and hand-offs are not.
constexpr bool is_work_stage(Stage stage) {
  return stage == Stage::kTargetForward || stage == Stage::kDrafterH2D ||
         stage == Stage::kDrafterNoise || stage == Stage::kDrafterVerify ||
         stage == Stage::kDrafterStep;
}

// Relaxed counters: they are statistics, read by status without ordering needs.
struct StageCounter {
  static constexpr uint32_t kBuckets = 40;  // bucket b counts durations in [2^b, 2^(b+1)) ns
  std::atomic<uint64_t> count;
  std::atomic<uint64_t> total_ns;
  std::atomic<uint64_t> max_ns;
  std::atomic<uint64_t> log2_histogram[kBuckets];
};

// One row per worker: index i < num_targets is target i, then the drafters.
struct alignas(64) ProcessEntry {
  std::atomic<uint32_t> role;   // Role, written by the creator
  std::atomic<uint32_t> epoch;  // bumped by every start of this index
  std::atomic<int32_t> pid;
  std::atomic<uint32_t> state;  // ProcessState
  std::atomic<int32_t> gpu;     // -1 in CPU mode
  std::atomic<uint32_t> starts;
  std::atomic<uint64_t> started_unix_ns;
  std::atomic<uint64_t> heartbeat_unix_ns;
  std::atomic<uint64_t> batches;  // produced (target) or consumed (drafter)
  std::atomic<uint64_t> tokens;
  std::atomic<uint64_t> hs_bytes;
  std::atomic<uint64_t> torn;       // drafter: batches that failed verification
  std::atomic<uint64_t> recovered;  // slots this process recovered
  StageCounter stages[kStageCount];
};

// Where target t is in its shard. Written only by the live incarnation of target t.
struct alignas(64) TargetProgress {
  // Next shard position to bind to a slot. Stored (release) after the slot's batch id is
  // bound and before the slot is published: see docs/ring-protocol.md, "nothing twice".
  std::atomic<uint64_t> next_seq;
  std::atomic<uint32_t> exhausted;  // 1 once every batch of the shard is published
  // Bumped (release) by a consumer that gave one of this target's early-published slots
  // back unread because its producer died before the copy completed (shm/copy_ticket.h);
  // the live incarnation adopts WRITING slots of its earlier epochs when it changes.
  std::atomic<uint32_t> returned;
};

// Accounting of one batch id, for the summary and the crash tests.
struct LedgerEntry {
  // The READING word of the consumption that finished this batch; 0 until then. Set by
  // CAS, so marking twice from one claim is harmless and from two claims is a duplicate.
  std::atomic<uint64_t> consume_word;
  std::atomic<uint32_t> flags;       // LedgerFlag bits
  std::atomic<uint32_t> duplicates;  // consumptions after the first
};
enum LedgerFlag : uint32_t {
  kLedgerPublished = 1u << 0,
  kLedgerRedelivered = 1u << 1,
  kLedgerTorn = 1u << 2,
};

// One per slot. `state` is the only word that transfers ownership; every other field
// is written by the owner only and ordered by the CAS on `state` that follows it.
struct alignas(64) SlotHeader {
  std::atomic<uint64_t> state;  // SlotState
  // Bound by the producer before CLAIMED -> WRITING (release); valid while WRITING,
  // READY, READING. Atomic because recoverers read it beside a (dead) writer.
  std::atomic<uint64_t> batch_id;
  std::atomic<uint64_t> publish_seq;
  std::atomic<uint32_t> token_count;
  std::atomic<uint32_t> num_docs;
  std::atomic<uint32_t> length_bucket;
  std::atomic<uint32_t> producer;        // process index that published it
  std::atomic<uint64_t> state_since_ns;  // CLOCK_MONOTONIC of the last transition
  // The READING word of the consumer that finished with this slot, stored (release)
  // before READING -> FREE; lets a recoverer tell "finished, then died" from "died
  // while reading".
  std::atomic<uint64_t> consumed_word;
  // Early publish (shm/copy_ticket.h): (publish_seq << 1) | pending. Pending: the payload
  // is complete only once `copy_event` (the producer's exported CUDA IPC event, recorded
  // after the slot's D2H) has completed, or once the producer settles the ticket (CAS,
  // release) after seeing its copy end. Stored by the producer before its release CAS to
  // READY.
  std::atomic<uint64_t> copy_ticket;
  std::atomic<uint32_t> producer_epoch;  // the epoch of `producer` that published it
  uint32_t reserved;
  unsigned char copy_event[64];  // cudaIpcEventHandle_t bytes; valid while pending
};

}  // namespace hsring
