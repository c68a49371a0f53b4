// The gradient all-reduce of N CPU drafter processes that train one drafter together: a
// shared-memory segment beside the ring ("<ring>-grads") where each member posts its
// batch's gradient with its counted-token count, waits for every member's post of the
// same step, and computes the token-weighted mean itself, in member order, so every
// replica gets the same bits. A member that sees a peer die, restart, or post from
// another starting point leaves with kGroupRestart: the launcher restarts it and every
// member reloads the newest checkpoint (docs/drafter-training.md, "In a run").
//
// Protocol (the invariants; the code beside each atomic says its ordering):
//  1. Member m owns its slot: only its live incarnation writes `post`, `joined`, its
//     counted-token counts and its two gradient buffers. A new incarnation first stores
//     post = (its epoch, step 0), then joined = (epoch, first step), before it writes a
//     buffer, so a reader that sees the old epoch after reading knows its read is valid.
//  2. The gradient of step s goes to buffer s % 2 and is published by post = (epoch, s)
//     (release). A member posts s + 1 only after reading every post of s, and reads its
//     peers' buffers s % 2 before posting s + 1; so a buffer is never rewritten while a
//     member of the same group may still read it (double buffering instead of a second
//     barrier).
//  3. A group is the set of incarnations that completed an exchange together. After its
//     first exchange a member remembers its peers' epochs; a peer whose epoch then
//     changes or whose process is dead breaks the group: every survivor leaves.
//  4. Before its first exchange a member waits for peers that have not posted yet (they
//     start or restart), and compares first steps (the checkpoint step loaded, plus one)
//     with those that have: the members with the smaller first step leave (they reload a
//     newer checkpoint); equal first steps mean the same loaded state.
//  Every wait is a slice of a SharedCondition (no wait is unbounded); between slices the
//  caller heartbeats and may stop the wait (a drain), and peers' liveness is re-checked.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "shm/ring.h"

namespace hsring {

// What a member knows of peer m's process: its current epoch (bumped by every start)
// and whether that incarnation is alive. For drafters, from the ring's process table.
struct PeerStatus {
  uint32_t epoch = 0;
  bool alive = false;
};
using PeerWatch = std::function<PeerStatus(uint32_t member)>;

enum class ExchangeResult {
  kReduced,       // the span holds the group's token-weighted mean gradient
  kGroupRestart,  // the group broke or this member is behind: restart from a checkpoint
  kStopped,       // the caller's keep_waiting() said stop (the ring drains)
  kFailed,        // the exchange itself failed with every peer alive (an NCCL error): a crash
  kGroupStopped,  // another machine's run stopped, ending the group (multi-node): stop too
};
const char* to_string(ExchangeResult result);

struct ExchangeStats {
  uint64_t exchanges = 0;
  uint64_t wait_ns = 0;  // waiting for peers' posts
};

// Thread safety: one GradExchange per member; members may be threads of one process
// (each with its own GradExchange) or processes.
class GradExchange {
 public:
  // The segment's name for a ring.
  static std::string name_for(const std::string& ring) {
    return ring + std::string(kGradientSegmentSuffix);
  }

  // Opens the segment `name` for member `rank` of `members`, creating it (mode 0600) when
  // it does not exist. `length` is the flat gradient's float count and `ring_stamp`
  // identifies the ring incarnation (its creation time): a segment made for another
  // member count, length or ring is refused, and so is a segment of another user or of a
  // mode other than 0600 (shm/segment_file.h). Throws Error with the reason.
  static std::unique_ptr<GradExchange> open(const std::string& name, uint32_t members,
                                            uint32_t rank, uint64_t length, uint64_t ring_stamp);
  // Unlinks the segment; false when there was none. Mapped members keep their mapping.
  static bool remove(const std::string& name);
  // The bytes of the segment open() makes for `members` and `length` (the launcher's
  // preflight counts them in /dev/shm).
  static uint64_t segment_size(uint32_t members, uint64_t length);

  ~GradExchange();
  GradExchange(const GradExchange&) = delete;
  GradExchange& operator=(const GradExchange&) = delete;

  uint32_t members() const { return members_; }
  uint32_t rank() const { return rank_; }
  const ExchangeStats& stats() const { return stats_; }

  // Announces this incarnation (`epoch`, its process epoch) and the first step it will
  // post: the loaded checkpoint's step + 1. Call once, before the first all_reduce.
  void join(uint32_t epoch, uint64_t first_step);

  // Posts `grads` (this member's batch-mean gradient over `counted` positions) for `step`,
  // waits for every member's post of `step`, then overwrites `grads` with
  //   sum over members m in index order of grad_m * (counted_m / sum of counted)
  // (in double, rounded once: the same bits on every member). `keep_waiting` runs
  // between wait slices (heartbeat there); false means the run drains: the wait goes on
  // while every peer lives (each that holds its batch of the step posts it), at most a
  // few seconds, and ends with kStopped once one has left. REQUIRES: join() was
  // called; grads.size() == length; step is the last step + 1.
  ExchangeResult all_reduce(uint64_t step, std::span<float> grads, uint64_t counted,
                            const PeerWatch& peers, const std::function<bool()>& keep_waiting,
                            std::chrono::milliseconds slice = std::chrono::milliseconds(20));

  // Why the last all_reduce gave kGroupRestart, for the log.
  const std::string& restart_reason() const { return restart_reason_; }

 private:
  struct Segment;
  struct Header;
  struct MemberSlot;
  enum class Verdict { kReady, kWait, kRestart };

  GradExchange(std::unique_ptr<Segment> segment, uint32_t members, uint32_t rank, uint64_t length);
  Header& header() const;
  MemberSlot& slot(uint32_t member) const;
  float* buffer(uint32_t member, uint64_t step) const;
  // Looks at every peer's post of `step`; kRestart sets restart_reason_. With `liveness`,
  // also asks `peers` (a syscall per peer), else judges from the posts alone.
  Verdict classify(uint64_t step, const PeerWatch* peers);
  // Whether a peer's process is gone (a syscall per peer).
  bool any_peer_gone(const PeerWatch& peers) const;
  // Reduces into `grads`; false when a peer's slot changed incarnation while being read.
  bool reduce(uint64_t step, std::span<float> grads);

  std::unique_ptr<Segment> segment_;
  uint32_t members_;
  uint32_t rank_;
  uint64_t length_;
  uint32_t epoch_ = 0;
  uint64_t first_step_ = 0;
  bool joined_ = false;
  // Peers' epochs at this member's first completed exchange (invariant 3); empty before.
  std::vector<uint32_t> group_epochs_;
  std::vector<uint64_t> post_seen_;  // scratch: the post words read before reducing
  std::string restart_reason_;
  ExchangeStats stats_;
};

}  // namespace hsring
