// The ring's validated shape as the C API hands it out.
#pragma once

#include "hsring/hsring.h"
#include "shm/ring.h"
#include "shm/ring_layout.h"

namespace hsring::capi {

hs_ring_shape to_c_shape(const RingShape& shape);

// hs_producer_segment / hs_consumer_segment for a handle's ring: a new read-only
// descriptor reopened through /proc/self/fd, so it is the very segment the handle maps
// (a ring removed or recreated since under that name changes nothing). Throws Error(kSystem).
void segment_of(const Ring& ring, const void** base, uint64_t* size, int* fd);

}  // namespace hsring::capi
