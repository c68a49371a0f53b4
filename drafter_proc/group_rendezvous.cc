#include "drafter_proc/group_rendezvous.h"

#include <fmt/format.h>

#include "common/clock.h"
#include "shm/nccl_rendezvous.h"
#include "shm/ring.h"

namespace hsring {

namespace {

static_assert(kGroupIdBytes == kNcclIdBytes, "the ring holds one id");

class RingRendezvous final : public GroupRendezvous {
 public:
  RingRendezvous(Ring& ring, uint32_t rank, uint32_t epoch, PeerWatch peers)
      : ring_(ring), rank_(rank), epoch_(epoch), peers_(std::move(peers)) {}

  void publish(const GroupId& id) override {
    unsigned char bytes[kNcclIdBytes];
    std::copy(id.begin(), id.end(), bytes);
    publish_nccl_id(ring_.header(), epoch_, bytes);
  }

  std::optional<GroupId> poll() override {
    const PeerStatus leader = peers_(0);
    unsigned char bytes[kNcclIdBytes];
    if (!leader.alive || !read_nccl_id(ring_.header(), leader.epoch, bytes)) return std::nullopt;
    leader_epoch_ = leader.epoch;
    GroupId id;
    std::copy(std::begin(bytes), std::end(bytes), id.begin());
    return id;
  }

  std::string waiting_for() const override { return "drafter 0 never published an NCCL id"; }

  std::string ended() override {
    if (rank_ == 0 || leader_epoch_ == 0 || peers_(0).epoch == leader_epoch_) return "";
    return "drafter 0 restarted since it published the NCCL id";
  }

  void leave() override {}  // every member sees every other through the ring
  void stop() override {}
  bool stopped() override { return false; }
  std::string describe() const override { return "id through the ring"; }

 private:
  Ring& ring_;
  uint32_t rank_, epoch_;
  PeerWatch peers_;
  uint32_t leader_epoch_ = 0;  // the incarnation whose id a member took
};

class FileRendezvous final : public GroupRendezvous {
 public:
  FileRendezvous(const std::string& dir, uint32_t members, uint32_t rank)
      : files_(dir, members, rank) {}

  void publish(const GroupId& id) override { generation_ = files_.publish(id); }

  std::optional<GroupId> poll() override {
    const std::optional<GroupRecord> record = files_.joinable();
    if (!record) return std::nullopt;
    generation_ = record->generation;
    files_.joined(generation_);
    return record->id;
  }

  std::string waiting_for() const override { return files_.waiting_for(); }

  std::string ended() override {
    look();
    return ended_;
  }

  bool stopped() override {
    look();
    return stopped_;
  }

  void leave() override {
    if (generation_ != 0) files_.mark_broken(generation_);
  }

  void stop() override {
    if (generation_ != 0) files_.mark_stopped(generation_);
  }

  std::string describe() const override {
    return fmt::format("id through {}, generation {}", files_.dir(), generation_);
  }

 private:
  static constexpr uint64_t kLookEveryNs = 200'000'000;

  // The files may sit on a network filesystem: looks at most every 200 ms.
  void look() {
    if (generation_ == 0) return;
    const uint64_t now = monotonic_ns();
    if (now < next_look_ns_) return;
    next_look_ns_ = now + kLookEveryNs;
    stopped_ = files_.is_stopped(generation_);
    ended_ = files_.ended(generation_);
  }

  GroupFiles files_;
  uint64_t generation_ = 0;  // the one published or joined
  uint64_t next_look_ns_ = 0;
  std::string ended_;  // as of the last look
  bool stopped_ = false;
};

}  // namespace

std::unique_ptr<GroupRendezvous> ring_rendezvous(Ring& ring, uint32_t rank, uint32_t epoch,
                                                 PeerWatch peers) {
  return std::make_unique<RingRendezvous>(ring, rank, epoch, std::move(peers));
}

std::unique_ptr<GroupRendezvous> file_rendezvous(const std::string& dir, uint32_t members,
                                                 uint32_t rank) {
  return std::make_unique<FileRendezvous>(dir, members, rank);
}

}  // namespace hsring
