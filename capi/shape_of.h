// The ring's validated shape as the C API hands it out.
#pragma once

#include "hsring/hsring.h"
#include "shm/ring_layout.h"

namespace hsring::capi {

hs_ring_shape to_c_shape(const RingShape& shape);

}  // namespace hsring::capi
