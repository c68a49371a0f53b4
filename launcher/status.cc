#include "launcher/status.h"

#include <fmt/format.h>

#include <sys/types.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "launcher/heartbeat_age.h"
#include "launcher/json_values.h"
#include "launcher/slot_census.h"
#include "shm/liveness.h"
#include "shm/recovery.h"

namespace hsring {

namespace {

std::string fixed(double value, int precision) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", precision, value);
  return buffer;
}

// One stage of one worker over the interval, for the stages the worker has ever timed.
struct StageRow {
  Stage stage;
  uint64_t count_total;  // since the ring was created
  StageStats interval;
};

std::vector<StageRow> stage_rows(const StatusSample::Process& before,
                                 const StatusSample::Process& after) {
  std::vector<StageRow> rows;
  for (uint32_t s = 0; s < kStageCount; ++s) {
    if (after.stages[s].count == 0) continue;
    rows.push_back({Stage(s), after.stages[s].count,
                    stage_stats(histogram_diff(before.stages[s], after.stages[s]))});
  }
  return rows;
}

// The share of the interval the worker spent in its work stages (is_work_stage): how busy
// its GPU (or CPU) was. None without an interval. A stage counts when it ends, so one that
// began before the interval may push the share over 1: clamped.
std::optional<double> busy_fraction(const StatusSample::Process& before,
                                    const StatusSample::Process& after, double interval_s) {
  if (interval_s <= 0) return std::nullopt;
  uint64_t busy_ns = 0;
  for (uint32_t s = 0; s < kStageCount; ++s)
    if (is_work_stage(Stage(s)) && after.stages[s].total_ns >= before.stages[s].total_ns)
      busy_ns += after.stages[s].total_ns - before.stages[s].total_ns;
  return std::clamp(double(busy_ns) / (interval_s * 1e9), 0.0, 1.0);
}

std::string worker_name(const Ring& ring, uint32_t i) {
  const auto role = Role(ring.process(i).role.load(std::memory_order_relaxed));
  const uint32_t index = role == Role::kTarget ? i : i - ring.shape().num_targets;
  return fmt::format("{} {}", to_string(role), index);
}

const char* const kPhaseNames[kSlotPhaseCount] = {"free", "claimed", "writing", "ready", "reading"};

const char* state_name(const ProcessEntry& p, bool alive, uint32_t epoch) {
  if (!alive) return epoch == 0 ? "never-started" : "dead";
  return to_string(ProcessState(p.state.load(std::memory_order_relaxed)));
}

std::string interval_text(double interval) {
  return interval > 0 ? "over the last " + fixed(interval, 1) + " s" : "since the ring was created";
}

}  // namespace

StatusSample read_status_sample(const Ring& ring) {
  StatusSample sample;
  sample.at_ns = monotonic_ns();
  for (uint32_t i = 0; i < ring.process_count(); ++i) {
    const ProcessEntry& p = ring.process(i);
    sample.processes.push_back({p.batches.load(std::memory_order_relaxed),
                                p.tokens.load(std::memory_order_relaxed),
                                p.hs_bytes.load(std::memory_order_relaxed), read_stages(p)});
  }
  return sample;
}

std::string render_status(const Ring& ring, const StatusOptions& options) {
  if (options.interval_s <= 0) {
    // Everything since creation: against a reading of all zeros at the same instant.
    const StatusSample after = read_status_sample(ring);
    StatusSample zero;
    zero.at_ns = after.at_ns;
    zero.processes.resize(after.processes.size());
    return render_status(ring, zero, after, options);
  }
  const StatusSample before = read_status_sample(ring);
  std::this_thread::sleep_for(std::chrono::microseconds(int64_t(options.interval_s * 1e6)));
  return render_status(ring, before, read_status_sample(ring), options);
}

namespace {

// Status as JSON (docs/operations.md lists the keys): numbers as the text shows them, a
// value that is not finite as null.
std::string status_json(const Ring& ring, const StatusSample& before_sample,
                        const StatusSample& after_sample, const SlotCensus& census) {
  const auto& before = before_sample.processes;
  const auto& after = after_sample.processes;
  const double interval = double(after_sample.at_ns - before_sample.at_ns) / 1e9;
  const RingShape& s = ring.shape();
  const RingHeader& h = ring.header();
  const uint64_t now_unix = unix_ns();

  Json doc;
  doc["ring"] = ring.name();
  doc["slots"] = s.slot_count;
  doc["slot_bytes"] = ring.layout().slot.stride;
  doc["max_tokens"] = s.max_tokens;
  doc["hidden_size"] = s.hidden_size;
  doc["num_layers"] = s.num_layers;
  doc["dtype"] = to_string(s.dtype);
  doc["launcher_pid"] = h.launcher_pid.load(std::memory_order_relaxed);
  doc["launcher_alive"] = liveness_lock_held_elsewhere(ring.fd(), kLauncherLockIndex);
  doc["slots_recovered"] = h.slots_recovered.load(std::memory_order_relaxed);
  doc["interval_s"] = json_number(interval, 3);
  doc["content"] = to_string(s.content);
  if (h.training.started()) {
    doc["training"] = {
        {"steps", h.training.steps.load(std::memory_order_relaxed)},
        {"loss", json_number(TrainingProgress::value(h.training.loss_ema), 4)},
        {"agreement", json_number(TrainingProgress::value(h.training.agreement_ema), 4)},
        {"acceptance_length", json_number(TrainingProgress::value(h.training.acceptance_ema), 4)},
        {"step_ms", json_number(h.training.step_us.load(std::memory_order_relaxed) / 1e3, 1)},
        {"checkpoint_step", h.training.checkpoint_step.load(std::memory_order_relaxed)}};
  } else {
    doc["training"] = nullptr;
  }
  Json& by_state = doc["slots_by_state"] = Json::object();
  for (int p = 0; p < kSlotPhaseCount; ++p) by_state[kPhaseNames[p]] = census.by_phase[p];
  by_state["corrupt"] = census.corrupt;
  doc["slot_problems"] = census.problems;

  Json& processes = doc["processes"] = Json::array();
  for (uint32_t i = 0; i < ring.process_count(); ++i) {
    const ProcessEntry& p = ring.process(i);
    const auto role = Role(p.role.load(std::memory_order_relaxed));
    const uint32_t epoch = p.epoch.load(std::memory_order_relaxed);
    const bool alive = epoch != 0 && owner_alive(ring, i, epoch);
    const uint64_t started = p.started_unix_ns.load(std::memory_order_relaxed);
    const double uptime = alive && started ? double(now_unix - started) / 1e9 : 0;
    const uint32_t starts = p.starts.load(std::memory_order_relaxed);
    Json process;
    process["role"] = to_string(role);
    process["index"] = role == Role::kTarget ? i : i - s.num_targets;
    process["pid"] = p.pid.load(std::memory_order_relaxed);
    process["epoch"] = epoch;
    process["state"] = state_name(p, alive, epoch);
    process["alive"] = alive;
    process["uptime_s"] = json_number(uptime, 1);
    process["batches"] = after[i].batches;
    process["tokens_per_s"] =
        json_number(interval > 0 ? double(after[i].tokens - before[i].tokens) / interval : 0, 1);
    process["hs_bytes_per_s"] = json_number(
        interval > 0 ? double(after[i].hs_bytes - before[i].hs_bytes) / interval : 0, 1);
    const std::optional<double> busy = busy_fraction(before[i], after[i], interval);
    process["busy"] = busy ? json_number(*busy, 3) : Json();
    process["restarts"] = starts > 0 ? starts - 1 : 0;
    process["torn"] = p.torn.load(std::memory_order_relaxed);
    process["gpu"] = p.gpu.load(std::memory_order_relaxed);
    const std::optional<double> age = heartbeat_age_s(p, now_unix);
    process["heartbeat_age_s"] = age ? json_number(*age, 1) : Json();
    // Over the interval; null where the stage timed nothing in it.
    Json& stages = process["stages"] = Json::object();
    for (const StageRow& row : stage_rows(before[i], after[i])) {
      const StageStats& st = row.interval;
      const auto ms = [&](double ns) { return st.count ? json_number(ns / 1e6, 4) : Json(); };
      stages[to_string(row.stage)] = {{"count", st.count},
                                      {"mean_ms", ms(st.mean_ns)},
                                      {"p50_ms", ms(st.p50_ns)},
                                      {"p99_ms", ms(st.p99_ns)},
                                      {"count_total", row.count_total}};
    }
    processes.push_back(std::move(process));
  }
  return json_text(doc);
}

}  // namespace

std::string render_status(const Ring& ring, const StatusSample& before_sample,
                          const StatusSample& after_sample, const StatusOptions& options) {
  const SlotCensus census = take_slot_census(ring);
  if (options.json) return status_json(ring, before_sample, after_sample, census);
  const auto& before = before_sample.processes;
  const auto& after = after_sample.processes;
  const double interval = double(after_sample.at_ns - before_sample.at_ns) / 1e9;

  const RingShape& s = ring.shape();
  const RingHeader& h = ring.header();
  const bool launcher_alive = liveness_lock_held_elsewhere(ring.fd(), kLauncherLockIndex);
  const uint64_t now_unix = unix_ns();

  std::ostringstream out;
  out << "ring '" << ring.name() << "': " << s.slot_count << " slots of "
      << fixed(double(ring.layout().slot.stride) / (1 << 20), 1) << " MiB (" << s.max_tokens
      << " tokens x " << s.num_layers << " layers x " << s.hidden_size << " " << to_string(s.dtype)
      << (s.split_layers ? ", split" : ", concatenated") << "), hs_min_ready " << s.hs_min_ready
      << "\n";
  out << "launcher pid " << h.launcher_pid.load(std::memory_order_relaxed)
      << (launcher_alive ? " (alive)" : " (not running)") << "; slots recovered so far "
      << h.slots_recovered.load(std::memory_order_relaxed) << "\n";
  out << "slots:";
  for (int p = 0; p < kSlotPhaseCount; ++p)
    out << " " << kPhaseNames[p] << " " << census.by_phase[p];
  if (census.corrupt > 0) out << " corrupt " << census.corrupt;
  out << "\n";
  for (const std::string& problem : census.problems) out << "  " << problem << "\n";
  if (h.training.started()) {
    out << "training: step " << h.training.steps.load(std::memory_order_relaxed) << ", loss "
        << fixed(TrainingProgress::value(h.training.loss_ema), 4)
        << (TrainingProgress::value(h.training.acceptance_ema) > 0
                ? ", acceptance length " +
                      fixed(TrainingProgress::value(h.training.acceptance_ema), 3)
                : ", agreement " + fixed(TrainingProgress::value(h.training.agreement_ema), 4))
        << ", " << fixed(h.training.step_us.load(std::memory_order_relaxed) / 1e3, 1)
        << " ms/step, last checkpoint at step "
        << h.training.checkpoint_step.load(std::memory_order_relaxed) << "\n";
  }
  out << "\n";
  char header[256];
  std::snprintf(header, sizeof header,
                "%-10s %8s %6s %-14s %-5s %9s %12s %10s %12s %10s %5s %8s %6s\n", "worker", "pid",
                "epoch", "state", "alive", "uptime_s", "heartbeat_s", "batches", "tokens/s", "MB/s",
                "busy", "restarts", "torn");
  out << header;
  for (uint32_t i = 0; i < ring.process_count(); ++i) {
    const ProcessEntry& p = ring.process(i);
    const uint32_t epoch = p.epoch.load(std::memory_order_relaxed);
    const bool alive = epoch != 0 && owner_alive(ring, i, epoch);
    const uint64_t started = p.started_unix_ns.load(std::memory_order_relaxed);
    const double uptime = alive && started ? double(now_unix - started) / 1e9 : 0;
    const double tokens_rate =
        interval > 0 ? double(after[i].tokens - before[i].tokens) / interval : 0;
    const double bytes_rate =
        interval > 0 ? double(after[i].hs_bytes - before[i].hs_bytes) / interval : 0;
    const uint32_t starts = p.starts.load(std::memory_order_relaxed);
    const uint32_t restarts = starts > 0 ? starts - 1 : 0;
    const uint64_t torn = p.torn.load(std::memory_order_relaxed);
    const std::optional<double> age = heartbeat_age_s(p, now_unix);
    const std::string age_text = age ? fixed(*age, 1) : "-";
    const std::optional<double> busy = busy_fraction(before[i], after[i], interval);
    const std::string busy_text = busy ? fixed(*busy, 2) : "-";
    char row[256];
    std::snprintf(row, sizeof row,
                  "%-10s %8d %6u %-14s %-5s %9.1f %12s %10llu %12.0f %10.1f %5s %8u %6llu\n",
                  worker_name(ring, i).c_str(), p.pid.load(std::memory_order_relaxed), epoch,
                  state_name(p, alive, epoch), alive ? "yes" : "no", uptime, age_text.c_str(),
                  (unsigned long long)after[i].batches, tokens_rate, bytes_rate / 1e6,
                  busy_text.c_str(), restarts, (unsigned long long)torn);
    out << row;
  }
  // Stage timings (shm/stage_timer.h; GPU stages are GPU time from CUDA events, see
  // docs/gpu-data-path.md) over the interval, for the workers that have timed any.
  bool header_done = false;
  for (uint32_t i = 0; i < ring.process_count(); ++i) {
    const auto rows = stage_rows(before[i], after[i]);
    if (rows.empty()) continue;
    if (!header_done) {
      char header[200];
      std::snprintf(header, sizeof header,
                    "\nstage timings %s\n%-10s %-5s %-20s %10s %12s %12s %12s\n",
                    interval_text(interval).c_str(), "worker", "gpu", "stage", "count", "mean_ms",
                    "p50_ms", "p99_ms");
      out << header;
      header_done = true;
    }
    const int gpu = ring.process(i).gpu.load(std::memory_order_relaxed);
    const std::string gpu_text = gpu < 0 ? "cpu" : std::to_string(gpu);
    for (const StageRow& r : rows) {
      char row[200];
      if (r.interval.count == 0) {
        std::snprintf(row, sizeof row, "%-10s %-5s %-20s %10d %12s %12s %12s\n",
                      worker_name(ring, i).c_str(), gpu_text.c_str(), to_string(r.stage), 0, "-",
                      "-", "-");
      } else {
        std::snprintf(row, sizeof row, "%-10s %-5s %-20s %10llu %12.3f %12.3f %12.3f\n",
                      worker_name(ring, i).c_str(), gpu_text.c_str(), to_string(r.stage),
                      (unsigned long long)r.interval.count, r.interval.mean_ns / 1e6,
                      r.interval.p50_ns / 1e6, r.interval.p99_ns / 1e6);
      }
      out << row;
    }
  }
  return out.str();
}

}  // namespace hsring
