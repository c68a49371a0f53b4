// What the launcher makes of `hsring run`'s options (worker/run_options.h, declared with
// their flags in worker/run_flag_table.cc): the ring's shape and the restart limits.
#pragma once

#include <cstdint>
#include <string>

#include "launcher/restart_policy.h"
#include "launcher/worker_spec.h"
#include "shm/ring_layout.h"
#include "worker/run_flags.h"
#include "worker/run_options.h"

namespace hsring {

// The batch count of a run given neither --batches nor --seconds: about half a minute
// of the default synthetic shape on a 2-core machine ...
inline constexpr uint64_t kDefaultRunBatches = 12000;
// ... and 200 training steps of the tiny drafter on the tiny target, about a minute.
inline constexpr uint64_t kDefaultModelRunBatches = 200;

inline constexpr uint32_t kSyntheticHiddenSize = 256;
inline constexpr uint32_t kDefaultCapturedLayers = 5;

// The ring shape the options ask for, given the parsed worker specs; a model's shape comes
// from its config (a preset, or the config.json of a Hugging Face folder).
// Throws Error(kUsage) for values no ring can have (naming the flag to change).
RingShape ring_shape_of(const RunOptions& options, const WorkerSpec& targets,
                        const WorkerSpec& drafters);
RestartLimits restart_limits_of(const RunOptions& options);

}  // namespace hsring
