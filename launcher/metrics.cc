#include "launcher/metrics.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "common/clock.h"
#include "launcher/heartbeat_age.h"
#include "launcher/slot_census.h"
#include "shm/recovery.h"

namespace hsring {

namespace {

class Exposition {
 public:
  explicit Exposition(const std::string& ring) : ring_label_(prometheus_label("ring", ring)) {}

  void family(const char* name, const char* type, const char* help) {
    out_ << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  }
  // One sample; `labels` is extra name="value" pairs from prometheus_label(), joined by ','.
  void sample(const std::string& name, const std::string& labels, double value) {
    out_ << name << "{" << ring_label_ << (labels.empty() ? "" : ",") << labels << "} "
         << prometheus_value(value) << "\n";
  }
  std::string str() const { return out_.str(); }

 private:
  std::string ring_label_;
  std::ostringstream out_;
};

std::string worker_labels(const Ring& ring, uint32_t i) {
  const ProcessEntry& p = ring.process(i);
  const auto role = Role(p.role.load(std::memory_order_relaxed));
  const uint32_t index = role == Role::kTarget ? i : i - ring.shape().num_targets;
  return prometheus_label("role", to_string(role)) + "," +
         prometheus_label("index", std::to_string(index)) + "," +
         prometheus_label("gpu", std::to_string(p.gpu.load(std::memory_order_relaxed)));
}

}  // namespace

std::string prometheus_label(const std::string& name, const std::string& value) {
  // The text format escapes exactly these three in a label value.
  std::string out = name + "=\"";
  for (const char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out + "\"";
}

std::string prometheus_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char number[64];
  std::snprintf(number, sizeof number, "%.17g", value);
  return number;
}

std::string render_prometheus(const Ring& ring) {
  Exposition m(ring.name());
  const RingHeader& h = ring.header();

  const SlotCensus census = take_slot_census(ring);
  m.family("hsring_slots", "gauge",
           "Ring slots by state; CORRUPT: a state word whose phase is not a phase.");
  for (int p = 0; p < kSlotPhaseCount; ++p)
    m.sample("hsring_slots", prometheus_label("state", to_string(SlotPhase(p))),
             census.by_phase[p]);
  m.sample("hsring_slots", prometheus_label("state", "CORRUPT"), census.corrupt);
  m.family("hsring_slots_recovered_total", "counter", "Slots returned from dead owners.");
  m.sample("hsring_slots_recovered_total", "",
           double(h.slots_recovered.load(std::memory_order_relaxed)));
  m.family("hsring_batches_published_total", "counter", "Publish sequence numbers handed out.");
  m.sample("hsring_batches_published_total", "",
           double(h.publish_seq.load(std::memory_order_relaxed)));
  if (h.training.started()) {
    // Drafter training (model rings): what drafter 0 publishes after each step.
    m.family("hsring_training_steps_total", "counter", "Drafter optimizer steps applied.");
    m.sample("hsring_training_steps_total", "",
             double(h.training.steps.load(std::memory_order_relaxed)));
    m.family("hsring_training_loss", "gauge", "Drafter loss, average of the last ~20 steps.");
    m.sample("hsring_training_loss", "", TrainingProgress::value(h.training.loss_ema));
    m.family("hsring_training_agreement_ratio", "gauge",
             "Drafter top-1 agreement with the target, average of the last ~20 steps.");
    m.sample("hsring_training_agreement_ratio", "",
             TrainingProgress::value(h.training.agreement_ema));
    m.family("hsring_training_acceptance_length", "gauge",
             "DFlash drafter: teacher-forced acceptance length (tokens per target forward) on "
             "each batch before training on it, average of the last ~20 steps; 0 otherwise.");
    m.sample("hsring_training_acceptance_length", "",
             TrainingProgress::value(h.training.acceptance_ema));
  }

  struct Counter {
    const char* name;
    const char* help;
    std::atomic<uint64_t> ProcessEntry::*field;
  };
  const Counter counters[] = {
      {"hsring_worker_batches_total", "Batches produced (target) or consumed (drafter).",
       &ProcessEntry::batches},
      {"hsring_worker_tokens_total", "Tokens produced or consumed.", &ProcessEntry::tokens},
      {"hsring_worker_hs_bytes_total", "Hidden-state bytes produced or consumed.",
       &ProcessEntry::hs_bytes},
      {"hsring_worker_torn_batches_total", "Batches that failed verification.",
       &ProcessEntry::torn},
      {"hsring_worker_slots_recovered_total", "Slots this worker recovered.",
       &ProcessEntry::recovered},
  };
  for (const Counter& c : counters) {
    m.family(c.name, "counter", c.help);
    for (uint32_t i = 0; i < ring.process_count(); ++i)
      m.sample(c.name, worker_labels(ring, i),
               double((ring.process(i).*c.field).load(std::memory_order_relaxed)));
  }
  m.family("hsring_worker_up", "gauge", "1 when the worker process is alive.");
  m.family("hsring_worker_epoch", "gauge", "Incarnation number of the worker.");
  m.family("hsring_worker_restarts_total", "counter", "Starts of the worker after its first.");
  for (uint32_t i = 0; i < ring.process_count(); ++i) {
    const ProcessEntry& p = ring.process(i);
    const uint32_t epoch = p.epoch.load(std::memory_order_relaxed);
    const uint32_t starts = p.starts.load(std::memory_order_relaxed);
    m.sample("hsring_worker_up", worker_labels(ring, i), epoch != 0 && owner_alive(ring, i, epoch));
    m.sample("hsring_worker_epoch", worker_labels(ring, i), epoch);
    m.sample("hsring_worker_restarts_total", worker_labels(ring, i), starts > 0 ? starts - 1 : 0);
  }
  // A worker that never beat has no sample (rather than a made-up age).
  m.family("hsring_process_heartbeat_age_seconds", "gauge",
           "Seconds since the worker's last heartbeat (its progress loop).");
  const uint64_t now_unix = unix_ns();
  for (uint32_t i = 0; i < ring.process_count(); ++i) {
    if (const std::optional<double> age = heartbeat_age_s(ring.process(i), now_unix))
      m.sample("hsring_process_heartbeat_age_seconds", worker_labels(ring, i), *age);
  }

  m.family("hsring_stage_duration_seconds", "histogram", "Time spent per pipeline stage.");
  for (uint32_t i = 0; i < ring.process_count(); ++i) {
    for (uint32_t s = 0; s < kStageCount; ++s) {
      const StageCounter& c = ring.process(i).stages[s];
      const uint64_t count = c.count.load(std::memory_order_relaxed);
      if (count == 0) continue;
      const std::string labels =
          worker_labels(ring, i) + "," + prometheus_label("stage", to_string(Stage(s)));
      uint64_t cumulative = 0;
      for (uint32_t b = 0; b < StageCounter::kBuckets; ++b) {
        const uint64_t in_bucket = c.log2_histogram[b].load(std::memory_order_relaxed);
        cumulative += in_bucket;
        if (in_bucket == 0 && b + 1 < StageCounter::kBuckets) continue;
        char le[32];
        std::snprintf(le, sizeof le, "%.9g", double(uint64_t(2) << b) / 1e9);
        m.sample("hsring_stage_duration_seconds_bucket", labels + "," + prometheus_label("le", le),
                 double(cumulative));
      }
      m.sample("hsring_stage_duration_seconds_bucket",
               labels + "," + prometheus_label("le", "+Inf"), double(count));
      m.sample("hsring_stage_duration_seconds_sum", labels,
               double(c.total_ns.load(std::memory_order_relaxed)) / 1e9);
      m.sample("hsring_stage_duration_seconds_count", labels, double(count));
    }
  }
  return m.str();
}

}  // namespace hsring
