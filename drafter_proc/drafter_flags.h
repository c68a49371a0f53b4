// What a drafter's share of the run's flags (worker/run_flag_table.cc, parsed by
// worker_main into one RunOptions) makes of its training: the options of
// run_training_drafter, field by field, so their defaults are RunOptions'.
#pragma once

#include "drafter_proc/training_drafter.h"
#include "worker/run_options.h"

namespace hsring {

// Throws Error(kUsage) for a warmup longer than a decay that ends (--total-steps).
TrainingDrafterOptions training_options_of(const RunOptions& run);

}  // namespace hsring
