// Prometheus text exposition (format 0.0.4) of a ring's counters, for `hsring status
// --prometheus` and node_exporter's textfile collector. Reads the segment only.
#pragma once

#include <string>

#include "common/text_file.h"  // write_file_atomically: a scraper never reads half a file
#include "shm/ring.h"

namespace hsring {

std::string render_prometheus(const Ring& ring);

// `name="value"` with the value escaped as the text format says: backslash, double quote
// and newline become \\, \" and \n. Any other byte (UTF-8 included) passes as it is.
std::string prometheus_label(const std::string& name, const std::string& value);
// A sample value: %.17g, or NaN, +Inf, -Inf as the format spells them.
std::string prometheus_value(double value);

}  // namespace hsring
