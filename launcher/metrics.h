// Prometheus text exposition (format 0.0.4) of a ring's counters, for `hsring status
// --prometheus` and node_exporter's textfile collector. Reads the segment only.
#pragma once

#include <string>

#include "common/text_file.h"  // write_file_atomically: a scraper never reads half a file
#include "shm/ring.h"

namespace hsring {

std::string render_prometheus(const Ring& ring);

}  // namespace hsring
