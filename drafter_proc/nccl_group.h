// GPU drafters that train one model together, all-reducing their gradients on the devices
// with NCCL. Drafter 0 (of node 0) makes a fresh unique id at every start and publishes it
// (group_rendezvous.h: through the ring segment on one machine, through files in a shared
// folder across machines); the others wait for the id of its live incarnation. The
// communicator is non-blocking, so no wait is unbounded: while an init or a collective is
// in flight the member polls it, its local peers' liveness in the ring's process table, the
// rendezvous (members on other machines) and the caller's keep_waiting(). A peer that died
// or restarted (NCCL alone would hang), an NCCL error, or a peer that loaded a newer
// checkpoint aborts the communicator and gives kGroupRestart: the launcher restarts the
// member and every member reloads the newest checkpoint, as with the shared-memory group.
//
// Each step: grads *= counted (this member's batch mean becomes a sum), one grouped
// all-reduce of the gradient and the counted tokens, then grads *= 1 / total: the
// token-weighted mean, the same bits on every member (NCCL gives every rank the same
// reduction), so the replicas' AdamW updates stay identical.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "drafter_proc/training_backend.h"

namespace hsring {

namespace train {
class CudaDrafterTrainer;
}

// Joins the group described by `join` on the current device. Never throws for a group
// problem (a dead peer, an NCCL failure): the first all_reduce then gives kGroupRestart
// with the reason. Throws Error(kCuda) for a device failure.
std::unique_ptr<GradientGroup> join_nccl_group(const GroupJoin& join,
                                               train::CudaDrafterTrainer& trainer);

}  // namespace hsring
