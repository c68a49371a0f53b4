#include "shm/stage_stats.h"

#include <algorithm>
#include <cstdio>

namespace hsring {

StageHistogram read_stage(const StageCounter& counter) {
  StageHistogram h;
  h.count = counter.count.load(std::memory_order_relaxed);
  h.total_ns = counter.total_ns.load(std::memory_order_relaxed);
  for (uint32_t b = 0; b < StageCounter::kBuckets; ++b)
    h.buckets[b] = counter.log2_histogram[b].load(std::memory_order_relaxed);
  return h;
}

StageHistograms read_stages(const ProcessEntry& entry) {
  StageHistograms out;
  for (uint32_t s = 0; s < kStageCount; ++s) out[s] = read_stage(entry.stages[s]);
  return out;
}

StageHistogram histogram_diff(const StageHistogram& before, const StageHistogram& after) {
  const auto minus = [](uint64_t a, uint64_t b) { return a > b ? a - b : 0; };
  StageHistogram d;
  d.count = minus(after.count, before.count);
  d.total_ns = minus(after.total_ns, before.total_ns);
  for (uint32_t b = 0; b < StageCounter::kBuckets; ++b)
    d.buckets[b] = minus(after.buckets[b], before.buckets[b]);
  return d;
}

double bucket_lower_ns(uint32_t bucket) {
  return bucket == 0 ? 0.0 : double(uint64_t(1) << bucket);
}

double bucket_upper_ns(uint32_t bucket) { return double(uint64_t(2) << bucket); }

double histogram_quantile_ns(const StageHistogram& h, double q) {
  uint64_t n = 0;
  for (uint64_t in_bucket : h.buckets) n += in_bucket;
  if (n == 0) return 0;
  const double rank = std::clamp(q, 0.0, 1.0) * double(n);
  uint64_t below = 0;
  uint32_t highest = 0;
  for (uint32_t b = 0; b < StageCounter::kBuckets; ++b) {
    const uint64_t in_bucket = h.buckets[b];
    if (in_bucket == 0) continue;
    highest = b;
    if (double(below + in_bucket) >= rank) {
      const double lower = bucket_lower_ns(b);
      const double fraction = (rank - double(below)) / double(in_bucket);
      return lower + (bucket_upper_ns(b) - lower) * std::clamp(fraction, 0.0, 1.0);
    }
    below += in_bucket;
  }
  return bucket_upper_ns(highest);  // rank rounded above n
}

StageStats stage_stats(const StageHistogram& h) {
  StageStats s;
  for (uint64_t in_bucket : h.buckets) s.count += in_bucket;
  if (s.count == 0) return s;
  s.mean_ns = h.count > 0 ? double(h.total_ns) / double(h.count) : 0;
  s.p50_ns = histogram_quantile_ns(h, 0.50);
  s.p99_ns = histogram_quantile_ns(h, 0.99);
  return s;
}

std::string format_stage_profile(const StageHistograms& before, const StageHistograms& after,
                                 double interval_s) {
  char text[200];
  std::snprintf(text, sizeof text, "profile %.1f s:", interval_s);
  std::string line = text;
  bool any = false;
  for (uint32_t s = 0; s < kStageCount; ++s) {
    const StageStats stats = stage_stats(histogram_diff(before[s], after[s]));
    if (stats.count == 0) continue;
    std::snprintf(text, sizeof text, "%s %s count=%llu mean_ms=%.3f p50_ms=%.3f p99_ms=%.3f",
                  any ? ";" : "", to_string(Stage(s)), (unsigned long long)stats.count,
                  stats.mean_ns / 1e6, stats.p50_ns / 1e6, stats.p99_ns / 1e6);
    line += text;
    any = true;
  }
  if (!any) line += " no stage timed";
  return line;
}

}  // namespace hsring
