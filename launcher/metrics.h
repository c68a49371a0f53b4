// Prometheus text exposition (format 0.0.4) of a ring's counters, for `hsring status
// --prometheus` and node_exporter's textfile collector. Reads the segment only.
#pragma once

#include <string>

#include "shm/ring.h"

namespace hsring {

std::string render_prometheus(const Ring& ring);

// Writes `text` to `path` atomically (temporary file in the same folder, then rename), so
// a scraper never reads half a file. Throws std::runtime_error on failure.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace hsring
