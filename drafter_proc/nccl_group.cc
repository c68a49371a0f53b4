#include "drafter_proc/nccl_group.h"

#include <fmt/format.h>

#include <nccl.h>

#include <cstring>
#include <thread>

#include "common/clock.h"
#include "drafter_proc/group_rendezvous.h"
#include "gpu/cuda_handles.h"
#include "shm/ring.h"
#include "train/cuda_drafter_kernels.h"
#include "train/cuda_drafter_trainer.h"

namespace hsring {

namespace {

static_assert(sizeof(ncclUniqueId) == kGroupIdBytes, "the rendezvous carries one id");

constexpr uint64_t kPeerCheckNs = 20'000'000;                // peers' liveness, every 20 ms
constexpr uint64_t kRendezvousLimitNs = 300'000'000'000ull;  // a member that never comes
// After an NCCL error, how long a member looks for the peer whose death explains it (a
// member on another machine is seen dead only once its restart marks the group broken).
constexpr uint64_t kFailureGraceNs = 15'000'000'000ull;
// Across machines a member that vanished (its machine died) is seen by nothing: an
// all-reduce that makes no progress this long ends the group.
constexpr uint64_t kRemoteStallNs = 600'000'000'000ull;

std::unique_ptr<GroupRendezvous> rendezvous_for(const GroupJoin& join) {
  if (join.spans_machines()) return file_rendezvous(join.rendezvous_dir, join.members, join.rank);
  return ring_rendezvous(join.ring, join.rank, join.epoch, join.peers);
}

class NcclGroup final : public GradientGroup {
 public:
  NcclGroup(const GroupJoin& join, train::CudaDrafterTrainer& trainer)
      : members_(join.members),
        rank_(join.rank),
        local_members_(join.local_members),
        local_rank_(join.rank - join.first_local_rank),
        spans_machines_(join.spans_machines()),
        first_step_(join.first_step),
        peers_(join.peers),
        keep_waiting_(join.keep_waiting),
        trainer_(trainer),
        counts_(gpu::DeviceBuffer::allocate(2 * sizeof(uint64_t))),
        counts_host_(gpu::PinnedBuffer::allocate(2 * sizeof(uint64_t))) {
    try {
      rendezvous_ = rendezvous_for(join);
    } catch (const std::exception& e) {
      note_reason(e.what());
      broken_ = true;
      failure_ = ExchangeResult::kFailed;
      return;
    }
    if (!rendezvous() || !initialise() || !agree_on_first_step()) {
      if (!broken_) fail();
      if (!keep_waiting_()) failure_ = ExchangeResult::kStopped;
    }
  }

  ~NcclGroup() override {
    if (comm_ != nullptr) {
      if (broken_) {
        (void)ncclCommAbort(comm_);
      } else {
        (void)cudaStreamSynchronize(trainer_.stream());
        (void)ncclCommDestroy(comm_);
      }
    }
  }

  uint32_t members() const override { return members_; }
  void stop() override {
    if (rendezvous_) guarded([&] { rendezvous_->stop(); });
  }
  const std::string& restart_reason() const override { return reason_; }
  std::string describe() const override {
    return fmt::format("all-reducing gradients with NCCL {}.{} ({})", NCCL_MAJOR, NCCL_MINOR,
                       rendezvous_ ? rendezvous_->describe() : "");
  }

  ExchangeResult all_reduce(uint64_t /*step*/, uint64_t counted) override {
    if (broken_) return failure_;
    cudaStream_t stream = trainer_.stream();
    float* grads = trainer_.device_gradients();
    const size_t n = trainer_.layout().total;
    // The batch mean becomes a sum over this member's counted positions.
    trainer_.scale_gradients(float(counted));
    counts_host_.as<uint64_t>()[0] = counted;
    HSRING_CUDA_CHECK(cudaMemcpyAsync(counts_.data(), counts_host_.data(), sizeof(uint64_t),
                                      cudaMemcpyHostToDevice, stream));
    if (!call(ncclGroupStart(), "ncclGroupStart")) return fail();
    const bool enqueued =
        call(ncclAllReduce(grads, grads, n, ncclFloat, ncclSum, comm_, stream), "ncclAllReduce") &&
        call(ncclAllReduce(counts_.data(), counts_.data(), 1, ncclUint64, ncclSum, comm_, stream),
             "ncclAllReduce");
    if (!call(ncclGroupEnd(), "ncclGroupEnd") || !enqueued) return fail();
    if (const ExchangeResult r = wait(false); r != ExchangeResult::kReduced) return r;
    HSRING_CUDA_CHECK(cudaMemcpyAsync(counts_host_.data(), counts_.data(), sizeof(uint64_t),
                                      cudaMemcpyDeviceToHost, stream));
    if (const ExchangeResult r = wait(true); r != ExchangeResult::kReduced) return r;
    const uint64_t total = counts_host_.as<uint64_t>()[0];
    trainer_.scale_gradients(total > 0 ? 1.0f / float(total) : 0.0f);
    return ExchangeResult::kReduced;
  }

 private:
  // Rank 0 makes the id and publishes it; the others wait for the id of its live
  // incarnation (group_rendezvous.h).
  bool rendezvous() {
    if (rank_ == 0) {
      if (!call(ncclGetUniqueId(&id_), "ncclGetUniqueId")) return false;
      GroupId bytes;
      std::memcpy(bytes.data(), &id_, sizeof id_);
      return guarded([&] { rendezvous_->publish(bytes); });
    }
    const uint64_t deadline = monotonic_ns() + kRendezvousLimitNs;
    while (true) {
      std::optional<GroupId> bytes;
      if (!guarded([&] { bytes = rendezvous_->poll(); })) return false;
      if (bytes) {
        std::memcpy(&id_, bytes->data(), sizeof id_);
        return true;
      }
      if (!keep_waiting_())
        return note_reason("the ring stopped before the group's id was published");
      if (monotonic_ns() > deadline)
        return note_reason("no NCCL id to join within 300 s: " + rendezvous_->waiting_for());
      std::this_thread::sleep_for(std::chrono::milliseconds(spans_machines_ ? 50 : 5));
    }
  }

  // Runs `body` (a rendezvous file operation); false, with the reason, when it throws.
  template <typename Body>
  bool guarded(Body&& body) {
    try {
      body();
      return true;
    } catch (const std::exception& e) {
      failure_ = ExchangeResult::kFailed;
      return note_reason(std::string("the group's rendezvous failed: ") + e.what());
    }
  }

  // A non-blocking ncclCommInitRankConfig, polled.
  bool initialise() {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t started =
        ncclCommInitRankConfig(&comm_, int(members_), id_, int(rank_), &config);
    if (started != ncclSuccess && started != ncclInProgress)
      return call(started, "ncclCommInitRankConfig");
    const uint64_t deadline = monotonic_ns() + kRendezvousLimitNs;
    while (true) {
      ncclResult_t state = ncclSuccess;
      if (!call(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError")) return false;
      if (state == ncclSuccess) break;
      if (state != ncclInProgress) return call(state, "ncclCommInitRankConfig");
      if (!keep_waiting_()) return note_reason("the ring stopped while the NCCL group formed");
      if (!peers_alive()) return false;
      if (monotonic_ns() > deadline) return note_reason("the NCCL group did not form within 300 s");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    // The group: these incarnations (of this machine's members). A later change of any breaks it.
    for (uint32_t m = 0; m < local_members_; ++m) group_epochs_.push_back(peers_(m).epoch);
    return true;
  }

  // Members that loaded an older checkpoint than a peer leave and reload (first steps
  // differ); equal first steps mean the same loaded state.
  bool agree_on_first_step() {
    cudaStream_t stream = trainer_.stream();
    counts_host_.as<uint64_t>()[1] = first_step_;
    HSRING_CUDA_CHECK(cudaMemcpyAsync(counts_.as<uint64_t>() + 1, counts_host_.as<uint64_t>() + 1,
                                      sizeof(uint64_t), cudaMemcpyHostToDevice, stream));
    if (!call(ncclAllReduce(counts_.as<uint64_t>() + 1, counts_.as<uint64_t>() + 1, 1, ncclUint64,
                            ncclMax, comm_, stream),
              "ncclAllReduce"))
      return false;
    if (wait(false) != ExchangeResult::kReduced) return false;
    HSRING_CUDA_CHECK(cudaMemcpyAsync(counts_host_.as<uint64_t>() + 1, counts_.as<uint64_t>() + 1,
                                      sizeof(uint64_t), cudaMemcpyDeviceToHost, stream));
    if (wait(true) != ExchangeResult::kReduced) return false;
    const uint64_t newest = counts_host_.as<uint64_t>()[1];
    if (newest != first_step_) {
      note_reason(fmt::format(
          "a peer loaded a newer checkpoint (it continues at step {}, this member at {})", newest,
          first_step_));
      leave();
      failure_ = ExchangeResult::kGroupRestart;  // reload the newer checkpoint: no crash
      return false;
    }
    return true;
  }

  // Polls until the communicator's last operation was enqueued (a non-blocking
  // communicator reports ncclInProgress until then: nothing may be enqueued behind it
  // before) and, with `stream_too`, until the stream's work completed. kGroupRestart
  // (after an abort) when a peer died or restarted or NCCL failed, kStopped or
  // kGroupStopped when a run stops (stop_requested()).
  ExchangeResult wait(bool stream_too) {
    cudaStream_t stream = trainer_.stream();
    uint64_t next_check = monotonic_ns() + kPeerCheckNs;
    const uint64_t stall_limit = monotonic_ns() + kRemoteStallNs;
    while (true) {
      ncclResult_t state = ncclSuccess;
      if (!call(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError")) return fail();
      if (state != ncclSuccess && state != ncclInProgress) {
        call(state, "the all-reduce");
        return fail();
      }
      if (state == ncclSuccess) {
        if (!stream_too) return ExchangeResult::kReduced;
        const cudaError_t done = cudaStreamQuery(stream);
        if (done == cudaSuccess) return ExchangeResult::kReduced;
        if (done != cudaErrorNotReady) {
          note_reason(std::string("the GPU failed during the all-reduce: ") +
                      cudaGetErrorString(done));
          return fail();
        }
      }
      if (monotonic_ns() >= next_check) {
        next_check = monotonic_ns() + kPeerCheckNs;
        if (const std::optional<ExchangeResult> stop = stop_requested()) return *stop;
        if (!peers_alive()) return fail();
        if (spans_machines_ && monotonic_ns() > stall_limit) {
          note_reason(
              "the all-reduce made no progress in 600 s: a member on another machine is "
              "unreachable");
          leave();
          return ExchangeResult::kGroupRestart;
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  // False (with the reason) when a member of the group is dead or another incarnation:
  // this machine's members through the ring, the others through the rendezvous. While the
  // group forms, a local peer not seen alive yet is still starting (or in its restart
  // backoff): it is waited for; one seen alive that then dies or restarts breaks it.
  bool peers_alive() {
    if (seen_epochs_.empty()) seen_epochs_.assign(local_members_, 0);
    for (uint32_t m = 0; m < local_members_; ++m) {
      if (m == local_rank_) continue;
      const PeerStatus p = peers_(m);
      const uint32_t known = group_epochs_.empty() ? seen_epochs_[m] : group_epochs_[m];
      if (known == 0) {
        if (p.alive) seen_epochs_[m] = p.epoch;
        continue;
      }
      if (p.epoch != known)
        return note_reason(fmt::format("drafter {} restarted (epoch {} -> {})", m, known, p.epoch));
      if (!p.alive) return note_reason(fmt::format("drafter {} died", m));
    }
    std::string ended;
    if (!guarded([&] { ended = rendezvous_->ended(); })) return false;
    return ended.empty() || note_reason(ended);
  }

  // After a failure: kGroupRestart when a peer died or restarted (NCCL errors follow a
  // peer's death), kFailed when every peer stays alive for kFailureGraceNs (NCCL itself
  // failed: a crash, so a failure that repeats stops the run instead of restarting the
  // group forever). Either way the group is left.
  ExchangeResult fail() {
    const std::string own_reason = reason_;
    reason_.clear();
    bool peers_fine = peers_alive();
    if (peers_fine && !own_reason.empty()) {
      const uint64_t deadline = monotonic_ns() + kFailureGraceNs;
      while (peers_fine && monotonic_ns() < deadline) {
        // A drain here or on another machine: the peers may have stopped first.
        if (const std::optional<ExchangeResult> stop = stop_requested()) return *stop;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        peers_fine = peers_alive();
      }
    }
    if (peers_fine) reason_ = own_reason;
    leave();
    failure_ =
        peers_fine && !own_reason.empty() ? ExchangeResult::kFailed : ExchangeResult::kGroupRestart;
    return failure_;
  }

  // kStopped when this machine's ring drains, kGroupStopped when another machine's run
  // ended the group (group_rendezvous.h), the communicator aborted either way; nullopt
  // while the run goes on.
  std::optional<ExchangeResult> stop_requested() {
    if (!keep_waiting_()) {
      abort_comm();
      return failure_ = ExchangeResult::kStopped;
    }
    bool remote = false;
    if (!guarded([&] { remote = rendezvous_->stopped(); }) || !remote) return std::nullopt;
    abort_comm();
    return failure_ = ExchangeResult::kGroupStopped;
  }

  // This member leaves a broken group: the communicator is aborted and members that see
  // it only through the rendezvous are told.
  void leave() {
    abort_comm();
    if (!left_ && rendezvous_) guarded([&] { rendezvous_->leave(); });
    left_ = true;
  }

  // The communicator cannot be used again: abort it (its kernels stop) once.
  void abort_comm() {
    if (!broken_ && comm_ != nullptr) (void)ncclCommAbort(comm_);
    if (comm_ != nullptr) comm_ = nullptr;
    broken_ = true;
  }

  // False, with the reason, unless `result` is success.
  bool call(ncclResult_t result, const char* what) {
    if (result == ncclSuccess || result == ncclInProgress) return true;
    std::string detail = ncclGetErrorString(result);
    if (comm_ != nullptr) {
      if (const char* last = ncclGetLastError(comm_); last != nullptr && *last)
        detail += ": " + std::string(last);
    }
    return note_reason(std::string(what) + " failed: " + detail);
  }

  // Keeps the first reason the group failed (for the log); false, for `return note_reason(...)`.
  bool note_reason(const std::string& reason) {
    if (reason_.empty()) reason_ = reason;
    return false;
  }

  uint32_t members_, rank_;
  uint32_t local_members_, local_rank_;  // on this machine's ring
  bool spans_machines_;
  uint64_t first_step_;
  PeerWatch peers_;                     // this machine's members, by drafter index
  std::function<bool()> keep_waiting_;  // false: the ring drains
  train::CudaDrafterTrainer& trainer_;
  gpu::DeviceBuffer counts_;  // uint64 [2]: counted tokens, first step
  gpu::PinnedBuffer counts_host_;
  ncclUniqueId id_{};
  ncclComm_t comm_ = nullptr;
  std::unique_ptr<GroupRendezvous> rendezvous_;
  std::vector<uint32_t> group_epochs_;  // local peers' epochs once the group formed
  std::vector<uint32_t> seen_epochs_;   // while it forms: epochs seen alive, 0 not yet
  bool broken_ = false;
  bool left_ = false;                                       // the rendezvous was told
  ExchangeResult failure_ = ExchangeResult::kGroupRestart;  // what a broken group gives
  std::string reason_;
};

}  // namespace

std::unique_ptr<GradientGroup> join_nccl_group(const GroupJoin& join,
                                               train::CudaDrafterTrainer& trainer) {
  return std::make_unique<NcclGroup>(join, trainer);
}

}  // namespace hsring
