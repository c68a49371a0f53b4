// The drafters that train one model together, as the training loop sees them: each step
// every member reduces its batch's gradient to the group's token-weighted mean. CPU
// drafters (and GPU drafters without NCCL) go through the shared-memory segment beside
// the ring (drafter_proc/grad_exchange.h, host buffers); GPU drafters through NCCL
// (nccl_group.h, device buffers). Either way a member that sees its group break (a peer
// died, restarted, or loaded another checkpoint) gets kGroupRestart and the group
// restarts from the newest checkpoint.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "drafter_proc/grad_exchange.h"
#include "train/drafter_trainer.h"

namespace hsring {

class Ring;

// What a member needs to join its drafter group. On one machine the group is the ring's
// drafters; across machines (--nnodes) every node's, ranked node by node.
struct GroupJoin {
  Ring& ring;
  uint32_t members = 0;                // >= 2, on every machine together
  uint32_t rank = 0;                   // node rank * local_members + the drafter index
  uint32_t local_members = 0;          // the drafters on this machine's ring
  uint32_t first_local_rank = 0;       // the rank of this machine's drafter 0
  uint32_t epoch = 0;                  // this process's incarnation
  uint64_t first_step = 0;             // the loaded checkpoint's step + 1
  std::string rendezvous_dir;          // across machines: the shared folder (group_files.h)
  PeerWatch peers;                     // this machine's drafters, by drafter index
  std::function<bool()> keep_waiting;  // between wait slices: heartbeat; false: stop waiting

  bool spans_machines() const { return local_members != members; }
};

class GradientGroup {
 public:
  virtual ~GradientGroup() = default;

  virtual uint32_t members() const = 0;
  // The gradient of the trainer the group was joined with (the mean over this member's
  // `counted` positions) becomes the group's token-weighted mean gradient, identical on
  // every member. While it waits, the join's `peers` are watched and its `keep_waiting`
  // runs between wait slices (heartbeat there; false stops the wait: kStopped).
  virtual ExchangeResult all_reduce(uint64_t step, uint64_t counted) = 0;
  // Why the last all_reduce gave kGroupRestart, for the log.
  virtual const std::string& restart_reason() const = 0;
  // This member stops with its machine's run (a drain): members on other machines, which
  // cannot see this ring drain, get kGroupStopped. Nothing to do within one machine.
  virtual void stop() {}
  // For the log: "averaging gradients through /dev/shm/RING-grads".
  virtual std::string describe() const = 0;
};

// `join`'s member through GradExchange's segment beside its ring, reducing `trainer`'s
// host gradients. Throws Error (a foreign or mismatched segment).
std::unique_ptr<GradientGroup> open_shared_memory_group(const GroupJoin& join,
                                                        train::DrafterTrainer& trainer);

}  // namespace hsring
