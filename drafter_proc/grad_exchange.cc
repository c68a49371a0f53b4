#include "drafter_proc/grad_exchange.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "common/clock.h"
#include "common/error.h"
#include "common/syscheck.h"
#include "shm/futex.h"
#include "shm/segment_file.h"
#include "shm/slot_state.h"

namespace hsring {

namespace {

constexpr uint64_t kMagic = 0x5344415247524e48ull;  // "HNRGRADS"
constexpr uint32_t kVersion = 1;
constexpr uint64_t kAlign = 64;
constexpr auto kOpenWait = std::chrono::seconds(5);
// How long a draining member waits for live peers' posts of its step: a step of a CPU
// drafter takes well under a second at the shapes it trains.
constexpr uint64_t kDrainGraceNs = 5'000'000'000;

// A post or join word: the member's epoch (the ring's 21 bits) and a step.
constexpr uint32_t kStepBits = 64 - SlotState::kEpochBits;
constexpr uint64_t kStepMask = (1ull << kStepBits) - 1;
constexpr uint64_t pack(uint32_t epoch, uint64_t step) {
  return (uint64_t(epoch & SlotState::kEpochMask) << kStepBits) | (step & kStepMask);
}
constexpr uint32_t epoch_of(uint64_t word) { return uint32_t(word >> kStepBits); }
constexpr uint64_t step_of(uint64_t word) { return word & kStepMask; }

constexpr uint64_t align_up(uint64_t value) { return (value + kAlign - 1) / kAlign * kAlign; }

}  // namespace

// Immutable fields are written by the creator before `magic` is stored with release;
// openers read them after loading `magic` with acquire.
struct alignas(64) GradExchange::Header {
  std::atomic<uint64_t> magic;
  uint32_t version;
  uint32_t members;
  uint64_t length;      // floats per gradient
  uint64_t ring_stamp;  // the ring incarnation this segment serves
  uint64_t slot_stride;
  uint64_t total_size;
  // Bumped (seq_cst, by SharedCondition) after every post: waiters sleep on it.
  alignas(64) std::atomic<uint32_t> post_futex;
  std::atomic<uint32_t> post_waiters;
};

// One member's slot, followed (at kAlign) by its two gradient buffers of `length` floats.
struct alignas(64) GradExchange::MemberSlot {
  std::atomic<uint64_t> post;    // (epoch, last step posted); step 0: joined, none posted
  std::atomic<uint64_t> joined;  // (epoch, first step of that incarnation)
  uint64_t counted[2];           // counted positions of the gradient in buffer b
};

struct GradExchange::Segment {
  SegmentFile file;
  SegmentMapping mapping;
};

const char* to_string(ExchangeResult result) {
  switch (result) {
    case ExchangeResult::kReduced:
      return "reduced";
    case ExchangeResult::kGroupRestart:
      return "group restart";
    case ExchangeResult::kStopped:
      return "stopped";
    case ExchangeResult::kFailed:
      return "failed";
    case ExchangeResult::kGroupStopped:
      return "group stopped";
  }
  return "?";
}

uint64_t GradExchange::segment_size(uint32_t members, uint64_t length) {
  const uint64_t stride = align_up(sizeof(MemberSlot)) + 2 * align_up(length * sizeof(float));
  return align_up(sizeof(Header)) + stride * members;
}

std::unique_ptr<GradExchange> GradExchange::open(const std::string& name, uint32_t members,
                                                 uint32_t rank, uint64_t length,
                                                 uint64_t ring_stamp) {
  const std::string what = "gradient exchange '" + name + "'";
  if (members < 1 || rank >= members || length < 1 || length > (1ull << 34))
    throw Error(Errc::kGroup, fmt::format("{}: bad request (rank {} of {}, {} floats)", what, rank,
                                          members, length));
  const uint64_t buffer_bytes = align_up(length * sizeof(float));
  const uint64_t stride = align_up(sizeof(MemberSlot)) + 2 * buffer_bytes;
  const uint64_t total = segment_size(members, length);

  // The same owner and mode checks as the ring's (shm/segment_file.h): a segment another
  // user made, or one others may write, is refused before it is mapped.
  SegmentFile file = SegmentFile::open(name, what, SegmentFile::Open::kCreateOrOpen,
                                       SegmentFile::Access::kReadWrite);
  const bool created = file.created();
  const int fd = file.fd();
  if (created) {
    // Reserved now: tmpfs would otherwise SIGBUS on first touch of a full /dev/shm.
    if (int err = ::posix_fallocate(fd, 0, off_t(total)); err != 0) {
      remove(name);
      throw sys_error(Errc::kGroup, err,
                      fmt::format("cannot reserve {} MiB for {}", total >> 20, what));
    }
  } else {
    // The creator reserves the whole size before it stores the magic.
    const auto deadline = std::chrono::steady_clock::now() + kOpenWait;
    struct stat st {};
    while (::fstat(fd, &st) == 0 && uint64_t(st.st_size) < sizeof(Header) &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (uint64_t(st.st_size) != total)
      throw Error(Errc::kGroup,
                  fmt::format("{} has {} bytes, not the {} that {} members of {} floats need: "
                              "it was made for another group or drafter; remove it (`hsring "
                              "ring remove`) when no drafter runs",
                              what, st.st_size, total, members, length));
  }
  auto segment = std::make_unique<Segment>(Segment{std::move(file), SegmentMapping()});
  try {
    segment->mapping = SegmentMapping(fd, total, true, what);
  } catch (const Error&) {
    if (created) remove(name);
    throw;
  }
  auto exchange =
      std::unique_ptr<GradExchange>(new GradExchange(std::move(segment), members, rank, length));
  Header& h = exchange->header();
  if (created) {
    // Fresh tmpfs pages are zero: every atomic starts at 0, every post at "none".
    h.version = kVersion;
    h.members = members;
    h.length = length;
    h.ring_stamp = ring_stamp;
    h.slot_stride = stride;
    h.total_size = total;
    // SYNC POINT WRITE: the fields above; pairs with the openers' acquire of magic.
    h.magic.store(kMagic, std::memory_order_release);
    return exchange;
  }
  const auto deadline = std::chrono::steady_clock::now() + kOpenWait;
  while (h.magic.load(std::memory_order_acquire) != kMagic) {
    if (std::chrono::steady_clock::now() >= deadline)
      throw Error(Errc::kGroup, what +
                                    " was never initialised (its creator died?): "
                                    "remove it (`hsring ring remove`) when no "
                                    "drafter runs");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (h.version != kVersion || h.members != members || h.length != length ||
      h.slot_stride != stride || h.total_size != total)
    throw Error(Errc::kGroup,
                fmt::format("{} is version {} for {} members of {} floats; this drafter needs "
                            "version {}, {} members of {} floats",
                            what, h.version, h.members, h.length, kVersion, members, length));
  if (h.ring_stamp != ring_stamp)
    throw Error(Errc::kGroup, what +
                                  " belongs to an earlier ring of that name: remove "
                                  "it (`hsring ring remove`) when no drafter runs");
  return exchange;
}

bool GradExchange::remove(const std::string& name) {
  return ::shm_unlink(("/" + name).c_str()) == 0;
}

GradExchange::GradExchange(std::unique_ptr<Segment> segment, uint32_t members, uint32_t rank,
                           uint64_t length)
    : segment_(std::move(segment)),
      members_(members),
      rank_(rank),
      length_(length),
      post_seen_(members) {}

GradExchange::~GradExchange() = default;

GradExchange::Header& GradExchange::header() const {
  return *reinterpret_cast<Header*>(segment_->mapping.base());
}

GradExchange::MemberSlot& GradExchange::slot(uint32_t member) const {
  std::byte* base = segment_->mapping.base();
  return *reinterpret_cast<MemberSlot*>(base + align_up(sizeof(Header)) +
                                        header().slot_stride * member);
}

float* GradExchange::buffer(uint32_t member, uint64_t step) const {
  auto* base = reinterpret_cast<std::byte*>(&slot(member)) + align_up(sizeof(MemberSlot));
  return reinterpret_cast<float*>(base + (step % 2) * align_up(length_ * sizeof(float)));
}

void GradExchange::join(uint32_t epoch, uint64_t first_step) {
  epoch_ = epoch & SlotState::kEpochMask;
  first_step_ = first_step;
  joined_ = true;
  group_epochs_.clear();
  MemberSlot& mine = slot(rank_);
  // Invariant 1: announce the new epoch before touching a buffer. seq_cst (a full fence
  // on x86), so no later buffer write becomes visible before it; a reader that read a
  // buffer and then still sees the old epoch (after its acquire fence) read it intact.
  mine.post.store(pack(epoch_, 0), std::memory_order_seq_cst);
  // SYNC POINT WRITE: joined; readers load it (acquire) after a post of the same epoch.
  mine.joined.store(pack(epoch_, first_step), std::memory_order_release);
}

GradExchange::Verdict GradExchange::classify(uint64_t step, const PeerWatch* peers) {
  Verdict verdict = Verdict::kReady;
  const bool grouped = !group_epochs_.empty();
  for (uint32_t m = 0; m < members_; ++m) {
    if (m == rank_) continue;
    MemberSlot& s = slot(m);
    // SYNC POINT READ: pairs with the release store of a post; its buffer is visible.
    const uint64_t post = s.post.load(std::memory_order_acquire);
    const uint32_t e = epoch_of(post);
    const uint64_t p = step_of(post);
    const std::string who = fmt::format("drafter {}", m);
    if (grouped) {  // invariant 3
      if (e != group_epochs_[m]) {
        restart_reason_ = fmt::format("{} restarted (epoch {})", who, e);
        return Verdict::kRestart;
      }
      // Its post of this step is there: whether it has exited since (a member that posted
      // the run's last step and left) does not matter, its buffer is complete.
      if (p == step || p == step + 1) continue;
      if (peers) {
        const PeerStatus st = (*peers)(m);
        if ((st.epoch & SlotState::kEpochMask) != e || !st.alive) {
          restart_reason_ = who + " died";
          return Verdict::kRestart;
        }
      }
      if (p + 1 == step) {
        verdict = Verdict::kWait;
        continue;
      }
      restart_reason_ = fmt::format("{} posted step {} while this one posted {}", who, p, step);
      return Verdict::kRestart;
    }
    // Invariant 4: before the first exchange.
    const uint64_t joined = s.joined.load(std::memory_order_acquire);
    if (epoch_of(joined) != e || p == 0) {  // not joined or not posted yet
      verdict = Verdict::kWait;
      continue;
    }
    if (peers) {
      const PeerStatus st = (*peers)(m);
      if ((st.epoch & SlotState::kEpochMask) != e || !st.alive) {  // a stale post
        verdict = Verdict::kWait;
        continue;
      }
    }
    const uint64_t f = step_of(joined);
    if (f > first_step_) {
      restart_reason_ =
          fmt::format("{} started from a newer checkpoint (step {}, this one from {})", who, f - 1,
                      first_step_ - 1);
      return Verdict::kRestart;
    }
    if (f < first_step_ || (p != step && p != step + 1)) verdict = Verdict::kWait;
  }
  return verdict;
}

bool GradExchange::reduce(uint64_t step, std::span<float> grads) {
  const uint64_t b = step % 2;
  std::vector<double> weight(members_);
  std::vector<const float*> source(members_);
  double total = 0;
  for (uint32_t m = 0; m < members_; ++m) {
    // SYNC POINT READ: as in classify(); the same post it judged, or a later one.
    post_seen_[m] = slot(m).post.load(std::memory_order_acquire);
    const uint64_t p = step_of(post_seen_[m]);
    if (m != rank_ && p != step && p != step + 1) return false;
    weight[m] = double(slot(m).counted[b]);
    total += weight[m];
    source[m] = buffer(m, step);
  }
  for (double& w : weight) w = total > 0 ? w / total : 0;
  // Blocked so the accumulator stays in cache; each element still sums members in index
  // order, so the bits do not depend on the block size or on who reduces.
  constexpr uint64_t kBlock = 2048;
  double acc[kBlock];
  for (uint64_t begin = 0; begin < length_; begin += kBlock) {
    const uint64_t n = std::min(kBlock, length_ - begin);
    std::fill(acc, acc + n, 0.0);
    for (uint32_t m = 0; m < members_; ++m) {
      const float* g = source[m] + begin;
      const double w = weight[m];
      for (uint64_t i = 0; i < n; ++i) acc[i] += double(g[i]) * w;
    }
    for (uint64_t i = 0; i < n; ++i) grads[begin + i] = float(acc[i]);
  }
  // Invariant 1: the buffers were read intact unless a peer's new incarnation announced
  // itself meanwhile. The acquire fence orders the buffer reads before the re-check.
  std::atomic_thread_fence(std::memory_order_acquire);
  for (uint32_t m = 0; m < members_; ++m) {
    if (m == rank_) continue;
    const uint64_t now = slot(m).post.load(std::memory_order_relaxed);
    if (epoch_of(now) != epoch_of(post_seen_[m]) || step_of(now) > step + 1) return false;
  }
  return true;
}

bool GradExchange::any_peer_gone(const PeerWatch& peers) const {
  for (uint32_t m = 0; m < members_; ++m)
    if (m != rank_ && !peers(m).alive) return true;
  return false;
}

ExchangeResult GradExchange::all_reduce(uint64_t step, std::span<float> grads, uint64_t counted,
                                        const PeerWatch& peers,
                                        const std::function<bool()>& keep_waiting,
                                        std::chrono::milliseconds slice) {
  if (!joined_ || grads.size() != length_ || step == 0 || step > kStepMask)
    throw std::logic_error("GradExchange::all_reduce: not joined, or a bad length or step");
  MemberSlot& mine = slot(rank_);
  const uint64_t b = step % 2;
  std::memcpy(buffer(rank_, step), grads.data(), length_ * sizeof(float));
  mine.counted[b] = counted;
  // SYNC POINT WRITE: buffer and count of `step`; pairs with the acquire loads of post.
  mine.post.store(pack(epoch_, step), std::memory_order_release);
  Header& h = header();
  SharedCondition posted(h.post_futex, h.post_waiters);
  posted.notify_all();

  const uint64_t start = monotonic_ns();
  uint64_t drain_seen = 0;  // when keep_waiting first said the run drains
  while (true) {
    const Verdict v = classify(step, &peers);
    if (v == Verdict::kReady) {
      if (reduce(step, grads)) break;
      restart_reason_ = "a peer restarted while its gradient was read";
      return keep_waiting() ? ExchangeResult::kGroupRestart : ExchangeResult::kStopped;
    }
    if (!keep_waiting()) {
      // A drain makes peers exit: that is a stop, not a broken group. But a peer that holds
      // its batch of this step posts it before it leaves: finish the step with it, so the
      // run's last step is not lost to when the drain began. One that left will not post,
      // and one still alive after kDrainGrace is not coming.
      const uint64_t now = monotonic_ns();
      if (drain_seen == 0) drain_seen = now;
      if (v == Verdict::kRestart || any_peer_gone(peers) || now - drain_seen > kDrainGraceNs)
        return ExchangeResult::kStopped;
    } else if (v == Verdict::kRestart) {
      return ExchangeResult::kGroupRestart;
    }
    posted.wait_until([&] { return classify(step, nullptr) != Verdict::kWait; }, slice);
  }
  if (group_epochs_.empty()) {
    group_epochs_.resize(members_);
    for (uint32_t m = 0; m < members_; ++m) group_epochs_[m] = epoch_of(post_seen_[m]);
  }
  ++stats_.exchanges;
  stats_.wait_ns += monotonic_ns() - start;
  return ExchangeResult::kReduced;
}

}  // namespace hsring
