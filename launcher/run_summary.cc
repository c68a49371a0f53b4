#include "launcher/run_summary.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "eval/eval_report.h"
#include "launcher/json_values.h"
#include "launcher/metrics.h"
#include "shm/ledger.h"

namespace hsring {

RunSummary summarize_run(const Ring& ring, double wall_s, uint64_t restarts_target,
                         uint64_t restarts_drafter) {
  const LedgerTotals totals = ledger_totals(ring, ring.shape().batch_limit);
  RunSummary s;
  s.ring = ring.name();
  s.batches_published = totals.published;
  s.batches_consumed = totals.consumed;
  s.batches_torn = totals.torn;
  s.batches_duplicated = totals.duplicated;
  s.batches_redelivered = totals.redelivered;
  s.batches_lost = totals.lost;
  s.batches_in_ring_at_exit = totals.in_ring;
  s.restarts_target = restarts_target;
  s.restarts_drafter = restarts_drafter;
  s.slots_recovered = ring.header().slots_recovered.load(std::memory_order_relaxed);
  uint64_t tokens = 0, bytes = 0, torn_events = 0;
  for (uint32_t i = ring.shape().num_targets; i < ring.process_count(); ++i) {
    tokens += ring.process(i).tokens.load(std::memory_order_relaxed);
    bytes += ring.process(i).hs_bytes.load(std::memory_order_relaxed);
    torn_events += ring.process(i).torn.load(std::memory_order_relaxed);
  }
  // Torn batches beyond the ledger still count, through the drafters' own counters.
  s.batches_torn = std::max(s.batches_torn, torn_events);
  s.wall_s = wall_s;
  const TrainingProgress& training = ring.header().training;
  s.steps = training.steps.load(std::memory_order_relaxed);
  s.trained = training.started();
  s.initial_loss = TrainingProgress::value(training.first_loss);
  s.final_loss = TrainingProgress::value(training.loss_ema);
  s.agreement = TrainingProgress::value(training.agreement_ema);
  s.acceptance_length_teacher_forced = TrainingProgress::value(training.acceptance_ema);
  s.tokens_per_s = wall_s > 0 ? double(tokens) / wall_s : 0;
  s.hs_bytes_per_s = wall_s > 0 ? double(bytes) / wall_s : 0;
  return s;
}

std::string summary_json(const RunSummary& s) {
  // Rates and losses to 6 decimals, as the document always gave them; a loss that is not
  // finite (a diverged run) is null.
  Json doc;
  doc["ring"] = s.ring;
  doc["batches_published"] = s.batches_published;
  doc["batches_consumed"] = s.batches_consumed;
  doc["batches_torn"] = s.batches_torn;
  doc["batches_duplicated"] = s.batches_duplicated;
  doc["batches_redelivered"] = s.batches_redelivered;
  doc["batches_lost"] = s.batches_lost;
  doc["batches_in_ring_at_exit"] = s.batches_in_ring_at_exit;
  doc["restarts_target"] = s.restarts_target;
  doc["restarts_drafter"] = s.restarts_drafter;
  doc["slots_recovered"] = s.slots_recovered;
  doc["tokens_per_s"] = json_number(s.tokens_per_s, 6);
  doc["hs_bytes_per_s"] = json_number(s.hs_bytes_per_s, 6);
  doc["wall_s"] = json_number(s.wall_s, 6);
  if (s.trained) {
    doc["steps"] = s.steps;
    doc["initial_loss"] = json_number(s.initial_loss, 6);
    doc["final_loss"] = json_number(s.final_loss, 6);
    doc["agreement"] = json_number(s.agreement, 6);
    if (s.acceptance_length_teacher_forced > 0)
      doc["acceptance_length_teacher_forced"] = json_number(s.acceptance_length_teacher_forced, 6);
  }
  if (s.evaluated) {
    doc["acceptance_length"] = json_number(s.acceptance_length, 6);
    doc["acceptance_length_interval"] = {json_number(s.acceptance_length_interval.low, 6),
                                         json_number(s.acceptance_length_interval.high, 6)};
    doc["acceptance_length_interval_level"] = s.acceptance_length_interval.level;
    doc["untrained_acceptance_length"] = json_number(s.untrained_acceptance_length, 6);
    doc["matches_greedy"] = s.matches_greedy;
    doc["eval_prompts"] = s.eval_prompts;
    doc["untrained_eval_prompts"] = s.untrained_eval_prompts;
    doc["eval_prompts_source"] = s.eval_prompts_source;
  }
  return json_text(doc);
}

void write_summary_json(const RunSummary& summary, const std::string& path) {
  write_file_atomically(path, summary_json(summary));
}

std::string summary_text(const RunSummary& s) {
  std::ostringstream out;
  out.precision(1);
  out << std::fixed << "summary: " << s.batches_consumed << " batches consumed of "
      << s.batches_published << " published in " << s.wall_s << " s; torn " << s.batches_torn
      << ", lost " << s.batches_lost << ", duplicated " << s.batches_duplicated << ", redelivered "
      << s.batches_redelivered << ", in ring " << s.batches_in_ring_at_exit
      << "; restarts: targets " << s.restarts_target << ", drafters " << s.restarts_drafter
      << "; slots recovered " << s.slots_recovered << "; " << s.tokens_per_s / 1e3
      << " K tokens/s, " << s.hs_bytes_per_s / 1e9 << " GB/s";
  if (s.trained) {
    out.precision(3);
    out << "; drafter: " << s.steps << " steps, loss " << s.initial_loss << " -> " << s.final_loss;
    if (s.acceptance_length_teacher_forced > 0)
      out << ", teacher-forced tau " << s.acceptance_length_teacher_forced;
    else
      out << ", agreement " << s.agreement;
  }
  if (s.evaluated)
    out << "\nacceptance length (speculative decoding of " << s.eval_prompts << " prompts, "
        << s.eval_prompts_source << "): "
        << eval::format_acceptance_length(s.acceptance_length, s.acceptance_length_interval)
        << " tokens per target forward, against " << s.untrained_acceptance_length
        << " for the untrained drafter (first " << s.untrained_eval_prompts << " prompts)"
        << (s.matches_greedy ? "; output identical to greedy decoding"
                             : "; OUTPUT DIFFERS FROM GREEDY DECODING");
  return out.str();
}

}  // namespace hsring
