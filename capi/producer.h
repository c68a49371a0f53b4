// A C API producer: a target worker whose forward is the caller's. It is hsring-target's
// crash-safe half (WorkerSession + BatchProducer: claim, bind before the shard position
// moves, adoption of the previous epoch's unpublished batches, publish with accounting)
// driven by calls instead of a loop: next_job() binds a slot, the caller writes the
// layers (and labels), publish() makes it READY.
//
// Thread safety: one caller thread at a time. The CUDA path's publisher thread publishes
// jobs handed to it and touches only those slots and relaxed counters (BatchProducer's
// publish_batch may run on another thread).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "capi/job_tokens.h"
#include "capi/launcher_watch.h"
#include "hsring/hsring.h"
#include "shm/slot_view.h"
#include "shm/worker_session.h"
#include "target_proc/batch_producer.h"

namespace hsring::capi {

class CudaPublisher;

class Producer {
 public:
  // Throws Error (kRing...: attach, busy index, epoch; kData...: shards).
  static std::unique_ptr<Producer> open(const std::string& ring, uint32_t index,
                                        const hs_producer_options& options);
  ~Producer();

  const Ring& ring() const { return session_->ring(); }
  uint32_t epoch() const { return session_->identity().epoch; }

  // hs_producer_next_job.
  hs_status next_job(uint32_t timeout_ms, hs_job& out);
  // The calls on a job; each throws Error (kApiState for an unknown ticket, ...).
  void set_tokens(uint64_t ticket, const int32_t* tokens, const int32_t* positions, uint32_t count,
                  const int32_t* doc_offsets, uint32_t num_docs);
  // Layers first .. first + count - 1 from sources[i], row_pitches[i] apart (NULL: dense).
  // All are checked before any is written or enqueued.
  void write_layers(uint64_t ticket, uint32_t first, uint32_t count, const void* const* hosts,
                    const uint64_t* row_pitches);
  void write_labels(uint64_t ticket, const int32_t* labels, uint32_t count);
  void copy_layers_device(uint64_t ticket, uint32_t first, uint32_t count,
                          const void* const* devices, const uint64_t* row_pitches, void* stream);
  hs_status publish(uint64_t ticket);
  hs_status flush();

 private:
  // A job between next_job() and publish().
  struct OpenJob {
    SlotClaim claim;
    BatchPlan plan;
    uint32_t layers_written = 0;  // bit k: layer k is written or its copy enqueued
    bool tokens_set = false;
    bool labels_written = false;
    bool device_copies = false;
    void* stream = nullptr;  // the one stream of its device copies
    uint64_t taken_ns = 0;   // when next_job handed it out: the caller's forward starts
    // Per position, 1 where the label counts (JobTokens::fill); empty: no mask known.
    std::vector<uint8_t> loss_mask;
  };
  // Where each of layers first .. first + count - 1 goes, its source pitch resolved;
  // throws Error(kApiShape) naming the first bad layer or pitch.
  struct LayerTarget {
    LayerRows rows;
    uint64_t source_pitch;
  };
  std::vector<LayerTarget>& checked_layers(const OpenJob& job, uint32_t first, uint32_t count,
                                           const void* const* sources, const uint64_t* row_pitches);

  Producer(std::unique_ptr<WorkerSession> session, const hs_producer_options& options);
  OpenJob& job(uint64_t ticket);
  bool keep_running();
  // Every batch of the shard is bound and published: tell the waiting drafters.
  hs_status at_shard_end(uint64_t deadline_ns);
  void fill_job(hs_job& out, const OpenJob& job) const;

  std::unique_ptr<WorkerSession> session_;
  Ring& ring_;
  std::unique_ptr<JobTokens> tokens_;
  std::unique_ptr<BatchProducer> producer_;
  LauncherWatch launcher_;
  std::deque<BatchJob> adopted_;  // re-produced first, in shard order
  uint64_t next_seq_ = 0;
  std::map<uint64_t, OpenJob> open_;        // by ticket (the slot word we installed: unique)
  std::vector<LayerTarget> layer_targets_;  // checked_layers' answer, reused (no allocation)
#if HSRING_CAPI_CUDA
  std::unique_ptr<CudaPublisher> publisher_;  // created by the first device copy
#endif
};

}  // namespace hsring::capi
