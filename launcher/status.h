// `hsring status` and `hsring ring inspect`: a read-only view of a ring's processes and
// slots. Reading never writes to the segment.
#pragma once

#include <string>

#include "shm/ring.h"

namespace hsring {

struct StatusOptions {
  bool json = false;
  double sample_s = 0.25;  // rates are measured over this interval
};

std::string render_status(const Ring& ring, const StatusOptions& options);

}  // namespace hsring
