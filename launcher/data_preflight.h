// The part of the launcher's preflight that looks at what model targets will read: the
// token shards must open and fit the model's vocabulary before any target starts, so a
// wrong --data fails once with the file and the fix, not as a crash loop of targets.
#pragma once

#include "launcher/run_options.h"
#include "shm/ring_layout.h"

namespace hsring {

// Does nothing for synthetic runs. Packs the built-in corpus into its cache on first use
// (so targets started together do not all pack it). Unless --no-verify-data, reads every
// token of --data once. Throws Error(kUsage) naming the shard and what to do: a
// missing folder, no shards, a corrupt header or offset table, a vocabulary larger than
// the model's, a token checksum that does not match, a token outside the shard's
// vocabulary (with its value and byte).
void check_target_data(const RunOptions& options, const RingShape& shape);

}  // namespace hsring
