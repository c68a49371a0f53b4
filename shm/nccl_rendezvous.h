// The GPU drafter group's NCCL unique id in the ring header (RingHeader::nccl_id): drafter
// 0's incarnation `epoch` publishes a fresh id at every start; the other members read the
// id of drafter 0's live incarnation. A seqlock on the epoch: the writer stores epoch 0,
// the id's words, then its epoch (release); a reader loads the epoch (acquire), the words,
// and the epoch again, and keeps the id only when both loads gave the epoch it asked for.
// Epochs only grow, so an id is read whole or not at all. The id is opaque here (NCCL's
// ncclUniqueId is 128 bytes); drafter_proc/nccl_group.cc is the user.
#pragma once

#include <cstdint>

#include "shm/ring_layout.h"

namespace hsring {

inline constexpr size_t kNcclIdBytes = sizeof(RingHeader::nccl_id);

// REQUIRES: the caller is drafter 0's incarnation `epoch` (> 0), the only writer.
void publish_nccl_id(RingHeader& header, uint32_t epoch, const unsigned char (&id)[kNcclIdBytes]);

// True, with the id in `id`, when incarnation `epoch` published it and no newer one has
// begun to; `id` is left unspecified otherwise.
bool read_nccl_id(const RingHeader& header, uint32_t epoch, unsigned char (&id)[kNcclIdBytes]);

}  // namespace hsring
