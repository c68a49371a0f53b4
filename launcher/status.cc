#include "launcher/status.h"

#include <sys/types.h>

#include <cstdio>
#include <sstream>
#include <thread>
#include <vector>

#include "common/clock.h"
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

std::string worker_name(const Ring& ring, uint32_t i) {
  const auto role = Role(ring.process(i).role.load(std::memory_order_relaxed));
  const uint32_t index = role == Role::kTarget ? i : i - ring.shape().num_targets;
  return std::string(to_string(role)) + " " + std::to_string(index);
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

std::string render_status(const Ring& ring, const StatusSample& before_sample,
                          const StatusSample& after_sample, const StatusOptions& options) {
  const auto& before = before_sample.processes;
  const auto& after = after_sample.processes;
  const double interval = double(after_sample.at_ns - before_sample.at_ns) / 1e9;

  const RingShape& s = ring.shape();
  const RingHeader& h = ring.header();
  uint32_t by_phase[kSlotPhaseCount] = {};
  for (uint32_t i = 0; i < ring.slot_count(); ++i)
    ++by_phase[uint32_t(SlotState(ring.slot(i).state.load(std::memory_order_relaxed)).phase())];
  const bool launcher_alive = liveness_lock_held_elsewhere(ring.fd(), kLauncherLockIndex);
  const char* phase_names[] = {"free", "claimed", "writing", "ready", "reading"};
  const uint64_t now_unix = unix_ns();

  std::ostringstream out;
  if (options.json) {
    out << "{\n  \"ring\": \"" << ring.name() << "\",\n  \"slots\": " << s.slot_count
        << ",\n  \"slot_bytes\": " << ring.layout().slot.stride
        << ",\n  \"max_tokens\": " << s.max_tokens << ",\n  \"hidden_size\": " << s.hidden_size
        << ",\n  \"num_layers\": " << s.num_layers << ",\n  \"dtype\": \"" << to_string(s.dtype)
        << "\",\n  \"launcher_pid\": " << h.launcher_pid.load(std::memory_order_relaxed)
        << ",\n  \"launcher_alive\": " << (launcher_alive ? "true" : "false")
        << ",\n  \"slots_recovered\": " << h.slots_recovered.load(std::memory_order_relaxed)
        << ",\n  \"interval_s\": " << fixed(interval, 3) << ",\n  \"content\": \""
        << to_string(s.content) << "\",\n  \"training\": ";
    if (h.training.started()) {
      out << "{\"steps\": " << h.training.steps.load(std::memory_order_relaxed)
          << ", \"loss\": " << fixed(TrainingProgress::value(h.training.loss_ema), 4)
          << ", \"agreement\": " << fixed(TrainingProgress::value(h.training.agreement_ema), 4)
          << ", \"step_ms\": " << fixed(h.training.step_us.load(std::memory_order_relaxed) / 1e3, 1)
          << ", \"checkpoint_step\": " << h.training.checkpoint_step.load(std::memory_order_relaxed)
          << "}";
    } else {
      out << "null";
    }
    out << ",\n  \"slots_by_state\": {";
    for (int p = 0; p < kSlotPhaseCount; ++p)
      out << (p ? ", " : "") << "\"" << phase_names[p] << "\": " << by_phase[p];
    out << "},\n  \"processes\": [";
  } else {
    out << "ring '" << ring.name() << "': " << s.slot_count << " slots of "
        << fixed(double(ring.layout().slot.stride) / (1 << 20), 1) << " MiB (" << s.max_tokens
        << " tokens x " << s.num_layers << " layers x " << s.hidden_size << " "
        << to_string(s.dtype) << (s.split_layers ? ", split" : ", concatenated")
        << "), hs_min_ready " << s.hs_min_ready << "\n";
    out << "launcher pid " << h.launcher_pid.load(std::memory_order_relaxed)
        << (launcher_alive ? " (alive)" : " (not running)") << "; slots recovered so far "
        << h.slots_recovered.load(std::memory_order_relaxed) << "\n";
    out << "slots:";
    for (int p = 0; p < kSlotPhaseCount; ++p) out << " " << phase_names[p] << " " << by_phase[p];
    out << "\n";
    if (h.training.started()) {
      out << "training: step " << h.training.steps.load(std::memory_order_relaxed) << ", loss "
          << fixed(TrainingProgress::value(h.training.loss_ema), 4) << ", agreement " << fixed(TrainingProgress::value(h.training.agreement_ema), 4)
          << ", " << fixed(h.training.step_us.load(std::memory_order_relaxed) / 1e3, 1)
          << " ms/step, last checkpoint at step "
          << h.training.checkpoint_step.load(std::memory_order_relaxed) << "\n";
    }
    out << "\n";
    char header[256];
    std::snprintf(header, sizeof header, "%-10s %8s %6s %-14s %-5s %9s %10s %12s %10s %8s %6s\n",
                  "worker", "pid", "epoch", "state", "alive", "uptime_s", "batches", "tokens/s",
                  "MB/s", "restarts", "torn");
    out << header;
  }
  for (uint32_t i = 0; i < ring.process_count(); ++i) {
    const ProcessEntry& p = ring.process(i);
    const auto role = Role(p.role.load(std::memory_order_relaxed));
    const uint32_t index = role == Role::kTarget ? i : i - s.num_targets;
    const uint32_t epoch = p.epoch.load(std::memory_order_relaxed);
    const bool alive = epoch != 0 && owner_alive(ring, i, epoch);
    const auto state = ProcessState(p.state.load(std::memory_order_relaxed));
    const uint64_t started = p.started_unix_ns.load(std::memory_order_relaxed);
    const double uptime = alive && started ? double(now_unix - started) / 1e9 : 0;
    const double tokens_rate =
        interval > 0 ? double(after[i].tokens - before[i].tokens) / interval : 0;
    const double bytes_rate =
        interval > 0 ? double(after[i].hs_bytes - before[i].hs_bytes) / interval : 0;
    const uint32_t starts = p.starts.load(std::memory_order_relaxed);
    const uint32_t restarts = starts > 0 ? starts - 1 : 0;
    const uint64_t torn = p.torn.load(std::memory_order_relaxed);
    const std::string name = std::string(to_string(role)) + " " + std::to_string(index);
    const char* state_name = alive ? to_string(state) : (epoch == 0 ? "never-started" : "dead");
    if (options.json) {
      out << (i ? ",\n" : "\n") << "    {\"role\": \"" << to_string(role)
          << "\", \"index\": " << index << ", \"pid\": " << p.pid.load(std::memory_order_relaxed)
          << ", \"epoch\": " << epoch << ", \"state\": \"" << state_name
          << "\", \"alive\": " << (alive ? "true" : "false")
          << ", \"uptime_s\": " << fixed(uptime, 1) << ", \"batches\": " << after[i].batches
          << ", \"tokens_per_s\": " << fixed(tokens_rate, 1)
          << ", \"hs_bytes_per_s\": " << fixed(bytes_rate, 1) << ", \"restarts\": " << restarts
          << ", \"torn\": " << torn << ", \"gpu\": " << p.gpu.load(std::memory_order_relaxed)
          << ", \"stages\": {";
      // Over the interval; null where the stage timed nothing in it.
      const auto ms = [&](uint64_t count, double ns) {
        return count ? fixed(ns / 1e6, 4) : std::string("null");
      };
      const auto rows = stage_rows(before[i], after[i]);
      for (size_t k = 0; k < rows.size(); ++k) {
        const StageStats& st = rows[k].interval;
        out << (k ? ", " : "") << "\"" << to_string(rows[k].stage) << "\": {\"count\": " << st.count
            << ", \"mean_ms\": " << ms(st.count, st.mean_ns)
            << ", \"p50_ms\": " << ms(st.count, st.p50_ns)
            << ", \"p99_ms\": " << ms(st.count, st.p99_ns)
            << ", \"count_total\": " << rows[k].count_total << "}";
      }
      out << "}}";
    } else {
      char row[256];
      std::snprintf(row, sizeof row,
                    "%-10s %8d %6u %-14s %-5s %9.1f %10llu %12.0f %10.1f %8u %6llu\n", name.c_str(),
                    p.pid.load(std::memory_order_relaxed), epoch, state_name, alive ? "yes" : "no",
                    uptime, (unsigned long long)after[i].batches, tokens_rate, bytes_rate / 1e6,
                    restarts, (unsigned long long)torn);
      out << row;
    }
  }
  if (options.json) {
    out << "\n  ]\n}\n";
    return out.str();
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
