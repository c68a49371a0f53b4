// What a run reports at exit (`--summary-json`), and whether it kept its promise: no batch
// torn, lost or duplicated.
#pragma once

#include <cstdint>
#include <string>

#include "eval/acceptance_interval.h"
#include "shm/ring.h"

namespace hsring {

struct RunSummary {
  std::string ring;
  uint64_t batches_published = 0;
  uint64_t batches_consumed = 0;
  uint64_t batches_torn = 0;
  uint64_t batches_duplicated = 0;
  uint64_t batches_redelivered = 0;
  uint64_t batches_lost = 0;
  uint64_t batches_in_ring_at_exit = 0;
  uint64_t restarts_target = 0;
  uint64_t restarts_drafter = 0;
  uint64_t slots_recovered = 0;
  double tokens_per_s = 0;
  double hs_bytes_per_s = 0;
  double wall_s = 0;

  // Drafter training (model runs): optimizer steps, this run's first and final loss (an
  // average of the last ~20 steps), top-1 agreement with the target (same average).
  bool trained = false;
  uint64_t steps = 0;
  double initial_loss = 0;
  double final_loss = 0;
  double agreement = 0;
  // The DFlash objective: teacher-forced tau (same average; 0 for same-position), and, when
  // the launcher evaluated the export by speculative decoding (eval_after_run), tau of the
  // trained (with its bootstrap interval over the prompts) and of the untrained drafter on
  // the held-out prompts, and where those came from.
  double acceptance_length_teacher_forced = 0;
  bool evaluated = false;
  double acceptance_length = 0;
  eval::AcceptanceInterval acceptance_length_interval;
  double untrained_acceptance_length = 0;
  bool matches_greedy = false;
  uint64_t eval_prompts = 0;
  uint64_t untrained_eval_prompts = 0;  // the first of eval_prompts (eval::kUntrainedPrompts)
  std::string eval_prompts_source;

  bool data_intact() const {
    return batches_torn == 0 && batches_lost == 0 && batches_duplicated == 0;
  }
};

// Gathers the ledger and counters of `ring` (after the workers stopped).
RunSummary summarize_run(const Ring& ring, double wall_s, uint64_t restarts_target,
                         uint64_t restarts_drafter);
std::string summary_json(const RunSummary& summary);
// Writes atomically (temporary file + rename). Throws Error (class system) on failure.
void write_summary_json(const RunSummary& summary, const std::string& path);
std::string summary_text(const RunSummary& summary);

}  // namespace hsring
