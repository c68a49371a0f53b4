// The drafters that train one model together, as the training loop sees them: each step
// every member reduces its batch's gradient to the group's token-weighted mean. CPU
// drafters (and GPU drafters without NCCL) go through the shared-memory segment beside
// the ring (shm/grad_exchange.h, host buffers); GPU drafters through NCCL
// (nccl_group.h, device buffers). Either way a member that sees its group break (a peer
// died, restarted, or loaded another checkpoint) gets kGroupRestart and the group
// restarts from the newest checkpoint.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "shm/grad_exchange.h"
#include "train/drafter_trainer.h"

namespace hsring {

class GradientGroup {
 public:
  virtual ~GradientGroup() = default;

  virtual uint32_t members() const = 0;
  // The gradient of the trainer the group was joined with (the mean over this member's
  // `counted` positions) becomes the group's token-weighted mean gradient, identical on
  // every member. `keep_waiting` runs between wait slices (heartbeat there; false stops
  // the wait: kStopped).
  virtual ExchangeResult all_reduce(uint64_t step, uint64_t counted, const PeerWatch& peers,
                                    const std::function<bool()>& keep_waiting) = 0;
  // Why the last all_reduce gave kGroupRestart, for the log.
  virtual const std::string& restart_reason() const = 0;
  // This member stops with its machine's run (a drain): members on other machines, which
  // cannot see this ring drain, get kGroupStopped. Nothing to do within one machine.
  virtual void stop() {}
  // For the log: "averaging gradients through /dev/shm/RING-grads".
  virtual std::string describe() const = 0;
};

// Member `rank` of `members` through GradExchange's segment for `ring_name`, reducing
// `trainer`'s host gradients, joined with this incarnation's `epoch` and the first step it
// will post. Throws std::runtime_error (a foreign or mismatched segment).
std::unique_ptr<GradientGroup> open_shared_memory_group(const std::string& ring_name,
                                                        uint64_t ring_stamp, uint32_t members,
                                                        uint32_t rank,
                                                        train::DrafterTrainer& trainer,
                                                        uint32_t epoch, uint64_t first_step);

}  // namespace hsring
