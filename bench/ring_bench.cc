// ring_bench: hsring's cross-process cost against conventional queues, in one run.
//
//   1. Round trip of one small message: process P sends an id on channel A, process Q
//      receives it and sends it back on channel B, P receives it. P times each round
//      trip; one way is about half of it.
//   2. Throughput of small messages with 1 producer / 1 consumer and 4 / 4, every side
//      its own forked process, for hsring, a pthread mutex + condvar queue in shared
//      memory, and boost::interprocess::message_queue; same topology and message count.
//   3. Payload throughput: 64 MiB slots written by one process and copied out by another,
//      against a plain single-thread memcpy of the same bytes (payload.h).
//   4. For the explanation of 1-3: each transport's CPU cost of a send plus a receive in
//      one process, and a bare polled cache line as the machine's latency floor.
// Ends with the ratios. --quick makes a short run for the smoke test; it checks nothing
// about speed.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_process.h"
#include "bench/bench_stats.h"
#include "bench/hsring_endpoints.h"
#include "bench/payload.h"
#include "bench/transports.h"
#include "common/clock.h"

namespace hsring::bench {
namespace {

struct Options {
  bool quick = false;
  uint64_t messages = 200'000;  // per throughput measurement
  uint32_t round_trips = 20'000;
  uint32_t reps = 3;            // throughput repetitions; the median is reported
  uint32_t payload_slots = 48;  // slots moved through the payload ring
  uint32_t payload_tokens = 4096;
  uint32_t capacity = 64;  // slots (messages) of the small-message channels
};

double seconds_between(uint64_t start_ns, uint64_t end_ns) {
  return double(end_ns - start_ns) / 1e9;
}

// --- 1. Round trips --------------------------------------------------------------------

struct LatencyStats {
  double min_us = 0;
  double median_us = 0;
  double p99_us = 0;
};

LatencyStats summarize(std::vector<uint64_t> samples_ns) {
  std::sort(samples_ns.begin(), samples_ns.end());
  auto at = [&](double q) {
    return double(samples_ns[size_t(q * double(samples_ns.size() - 1))]) / 1e3;
  };
  return LatencyStats{at(0.0), at(0.5), at(0.99)};
}

// P sends i on `there` and waits for it on `back`; Q echoes. The first `warmup` round
// trips fault in pages and caches and are not counted.
LatencyStats measure_round_trips(Transport& there, Transport& back, uint32_t warmup,
                                 uint32_t count) {
  SharedMapping samples_map(sizeof(uint64_t) * count);
  uint64_t* samples = samples_map.as<uint64_t>();
  ChildGroup group;
  group.spawn([&](Child& child) {
    auto out = there.open_sender(0);
    auto in = back.open_receiver(0);
    child.wait_for_start();
    for (uint32_t i = 0; i < warmup + count; ++i) {
      const uint64_t sent_ns = monotonic_ns();
      out->send(i);
      if (in->receive() != i) throw std::runtime_error("a round trip returned another id");
      if (i >= warmup) samples[i - warmup] = monotonic_ns() - sent_ns;
    }
    child.report().end_ns.store(monotonic_ns(), std::memory_order_relaxed);
  });
  group.spawn([&](Child& child) {
    auto in = there.open_receiver(0);
    auto out = back.open_sender(0);
    child.wait_for_start();
    for (uint32_t i = 0; i < warmup + count; ++i) out->send(in->receive());
    child.report().end_ns.store(monotonic_ns(), std::memory_order_relaxed);
  });
  group.start(kSetupLimit);
  group.wait_all(kRunLimit);
  return summarize(std::vector<uint64_t>(samples, samples + count));
}

// --- 2. Small-message throughput ---------------------------------------------------------

struct ThroughputSample {
  double ops_per_s = 0;
  double sleeps_per_message = 0;    // voluntary context switches, all processes
  double preempts_per_message = 0;  // involuntary ones
};

// Producer p sends ids p, p + n, p + 2n, ... below `messages`; every consumer takes
// exactly messages / n of them, so nobody waits for a message that never comes and the
// count is exact. REQUIRES: messages % n == 0.
ThroughputSample measure_throughput(Transport& transport, uint32_t n, uint64_t messages) {
  ChildGroup group;
  for (uint32_t p = 0; p < n; ++p) {
    group.spawn([&, p](Child& child) {
      auto out = transport.open_sender(p);
      child.wait_for_start();
      const SwitchCounter switches;
      for (uint64_t id = p; id < messages; id += n) out->send(id);
      child.report().end_ns.store(monotonic_ns(), std::memory_order_relaxed);
      switches.record(child.report());
    });
  }
  for (uint32_t c = 0; c < n; ++c) {
    group.spawn([&, c](Child& child) {
      auto in = transport.open_receiver(c);
      child.wait_for_start();
      const SwitchCounter switches;
      uint64_t checksum = 0;
      for (uint64_t i = 0; i < messages / n; ++i) checksum += in->receive();
      child.report().end_ns.store(monotonic_ns(), std::memory_order_relaxed);
      switches.record(child.report());
      child.report().checksum.store(checksum, std::memory_order_relaxed);
    });
  }
  const uint64_t start_ns = group.start(kSetupLimit);
  group.wait_all(kRunLimit);
  uint64_t checksum = 0;
  for (uint32_t c = 0; c < n; ++c) checksum += group.report(n + c).checksum.load();
  if (checksum != messages * (messages - 1) / 2) {
    throw std::runtime_error(transport.label() + ": consumers saw other ids than were sent");
  }
  ThroughputSample sample;
  sample.ops_per_s = double(messages) / seconds_between(start_ns, group.latest_end_ns());
  for (uint32_t rank = 0; rank < 2 * n; ++rank) {
    sample.sleeps_per_message += double(group.report(rank).voluntary_switches.load());
    sample.preempts_per_message += double(group.report(rank).involuntary_switches.load());
  }
  sample.sleeps_per_message /= double(messages);
  sample.preempts_per_message /= double(messages);
  return sample;
}

enum class Kind { kFloor, kHsring, kHsringPolling, kMutex, kMessageQueue };
constexpr Kind kRoundTripKinds[] = {Kind::kFloor, Kind::kHsring, Kind::kHsringPolling, Kind::kMutex,
                                    Kind::kMessageQueue};
// The floor is one word for one producer and one consumer: no throughput topology.
constexpr Kind kThroughputKinds[] = {Kind::kHsring, Kind::kHsringPolling, Kind::kMutex,
                                     Kind::kMessageQueue};

const char* kind_label(Kind kind) {
  switch (kind) {
    case Kind::kFloor:
      return "one polled word";
    case Kind::kHsring:
      return "hsring (futex waits)";
    case Kind::kHsringPolling:
      return "hsring (polling)";
    case Kind::kMutex:
      return "pthread mutex+cond";
    case Kind::kMessageQueue:
      return "boost message_queue";
  }
  return "?";
}

std::unique_ptr<Transport> make_transport(Kind kind, const std::string& tag,
                                          const ChannelShape& shape) {
  switch (kind) {
    case Kind::kFloor:
      return make_spin_word_transport(shape);
    case Kind::kHsring:
      return make_hsring_transport(tag, shape, WaitMode::kBlocking);
    case Kind::kHsringPolling:
      return make_hsring_transport(tag, shape, WaitMode::kPolling);
    case Kind::kMutex:
      return make_mutex_transport(shape);
    case Kind::kMessageQueue:
      return make_message_queue_transport(tag, shape);
  }
  return nullptr;
}

// --- 4. CPU cost per message --------------------------------------------------------------

// One process sends a message and receives it back from the same channel, `count` times:
// the cost of the calls themselves with warm caches, no second core and no sleeping.
// Returns nanoseconds per message (a send plus a receive).
double measure_cpu_cost(Transport& transport, uint32_t count) {
  SharedMapping result(sizeof(double));
  ChildGroup group;
  group.spawn([&](Child& child) {
    auto out = transport.open_sender(0);
    auto in = transport.open_receiver(0);
    child.wait_for_start();
    const uint64_t start_ns = monotonic_ns();
    for (uint32_t i = 0; i < count; ++i) {
      out->send(i);
      if (in->receive() != i) throw std::runtime_error("received another id than was sent");
    }
    *result.as<double>() = double(monotonic_ns() - start_ns) / count;
  });
  group.start(kSetupLimit);
  group.wait_all(kRunLimit);
  return *result.as<double>();
}

// --- The run -----------------------------------------------------------------------------

std::string load_average() {
  std::ifstream file("/proc/loadavg");
  std::string one, five, fifteen;
  file >> one >> five >> fifteen;
  return file ? one + " " + five + " " + fifteen : "unknown";
}

struct RoundTripRow {
  Kind kind;
  LatencyStats stats;
};

std::vector<RoundTripRow> run_round_trips(const Options& options) {
  const uint32_t warmup = std::max<uint32_t>(options.round_trips / 20, 10);
  ChannelShape shape;
  shape.capacity = options.capacity;
  shape.id_limit = warmup + options.round_trips;
  std::vector<RoundTripRow> rows;
  for (Kind kind : kRoundTripKinds) {
    const std::string tag = "rtt" + std::to_string(int(kind));
    auto there = make_transport(kind, tag + "-a", shape);
    auto back = make_transport(kind, tag + "-b", shape);
    rows.push_back({kind, measure_round_trips(*there, *back, warmup, options.round_trips)});
  }
  return rows;
}

void print_round_trips(const Options& options, const std::vector<RoundTripRow>& rows) {
  std::printf(
      "\n1. Round trip of one small message between two processes (ping-pong over two\n"
      "   one-way channels A: P->Q, B: Q->P; P times send-to-receive-back). %u round\n"
      "   trips after warm-up; channels of %u messages (hsring: %u slots, 1 token,\n"
      "   hidden 1, 1 layer, hs_min_ready 1). One way is about half a round trip.\n"
      "   'one polled word' bounces one cache line, no protocol: the machine's floor.\n\n",
      options.round_trips, options.capacity, options.capacity);
  std::printf("   %-22s %12s %12s %12s %16s\n", "transport", "min", "median", "p99",
              "one-way median");
  for (const RoundTripRow& row : rows) {
    std::printf("   %-22s %9.2f us %9.2f us %9.2f us %13.2f us\n", kind_label(row.kind),
                row.stats.min_us, row.stats.median_us, row.stats.p99_us, row.stats.median_us / 2);
  }
}

using Throughputs = std::map<std::pair<Kind, uint32_t>, std::vector<ThroughputSample>>;

// Repetitions interleave the transports, so that a burst of load from elsewhere on the
// machine does not land on one transport only.
Throughputs run_throughputs(const Options& options) {
  Throughputs results;
  for (uint32_t rep = 0; rep < options.reps; ++rep) {
    for (uint32_t n : {1u, 4u}) {
      ChannelShape shape{.producers = n,
                         .consumers = n,
                         .capacity = options.capacity,
                         .id_limit = options.messages};
      for (Kind kind : kThroughputKinds) {
        const std::string tag = "tput" + std::to_string(int(kind)) + "-" + std::to_string(n) + "x" +
                                std::to_string(n) + "-r" + std::to_string(rep);
        auto transport = make_transport(kind, tag, shape);
        results[{kind, n}].push_back(measure_throughput(*transport, n, options.messages));
      }
    }
  }
  return results;
}

// The median over repetitions of one field of the samples.
double median_of(const Throughputs& results, Kind kind, uint32_t n,
                 double ThroughputSample::*field = &ThroughputSample::ops_per_s) {
  std::vector<double> values;
  for (const ThroughputSample& sample : results.at({kind, n})) values.push_back(sample.*field);
  return median(values);
}

void print_throughputs(const Options& options, const Throughputs& results) {
  std::printf(
      "\n2. Small-message throughput, one process per producer and per consumer;\n"
      "   %llu messages per measurement, median of %u; channels of %u messages.\n"
      "   sleeps/preempts: voluntary/involuntary context switches per message, all\n"
      "   processes together (a futex or condvar wait that slept counts as a sleep).\n\n",
      static_cast<unsigned long long>(options.messages), options.reps, options.capacity);
  std::printf("   %-22s %12s %7s %8s %12s %7s %8s\n", "transport", "1P/1C ops/s", "sleeps",
              "preempts", "4P/4C ops/s", "sleeps", "preempts");
  for (Kind kind : kThroughputKinds) {
    std::printf("   %-22s", kind_label(kind));
    for (uint32_t n : {1u, 4u}) {
      std::printf(" %12.0f %7.3f %8.3f", median_of(results, kind, n),
                  median_of(results, kind, n, &ThroughputSample::sleeps_per_message),
                  median_of(results, kind, n, &ThroughputSample::preempts_per_message));
    }
    std::printf("\n");
  }
}

void print_payload(const Options& options, const PayloadResult& payload) {
  std::printf(
      "\n3. Payload: %u slots of %.1f MiB (%u tokens x hidden %u x %u layers, bf16)\n"
      "   written by one process (memcpy in) and copied out by another through a\n"
      "   %u-slot ring; against one thread's memcpy of the same bytes. GB = 1e9 B.\n\n",
      options.payload_slots, double(payload.slot_bytes) / (1 << 20), options.payload_tokens,
      kPayloadHidden, kPayloadLayers, kPayloadRingSlots);
  std::printf("   %-34s %8.2f GB/s\n", "hsring producer -> consumer", payload.ring_gbps);
  std::printf("   %-34s %8.2f GB/s\n", "plain memcpy, single thread", payload.memcpy_gbps);
}

void print_ratios(const std::vector<RoundTripRow>& round_trips, const Throughputs& tput,
                  const PayloadResult& payload) {
  auto ratio = [&](Kind a, Kind b, uint32_t n) {
    return median_of(tput, a, n) / median_of(tput, b, n);
  };
  std::printf("\nAims: round-trip median < 1 us; hsring 4x4 >= 5x the mutex queue.\n");
  for (const RoundTripRow& row : round_trips) {
    if (row.kind == Kind::kFloor) {
      std::printf("   %-22s round-trip median %.2f us (no protocol: the floor here)\n",
                  kind_label(row.kind), row.stats.median_us);
    }
    if (row.kind != Kind::kHsring && row.kind != Kind::kHsringPolling) continue;
    std::printf("   %-22s round-trip median %.2f us: %s\n", kind_label(row.kind),
                row.stats.median_us, row.stats.median_us < 1.0 ? "met" : "not met");
  }
  std::printf("   %-22s 4x4 is %.2fx the mutex queue: %s\n", kind_label(Kind::kHsring),
              ratio(Kind::kHsring, Kind::kMutex, 4),
              ratio(Kind::kHsring, Kind::kMutex, 4) >= 5.0 ? "met" : "not met");

  std::printf("\nRatios (hsring = futex waits, as the workers run; polling in brackets)\n");
  for (uint32_t n : {1u, 4u}) {
    std::printf("ratio hsring/mutex %ux%u: %.2fx (%.2fx)\n", n, n,
                ratio(Kind::kHsring, Kind::kMutex, n),
                ratio(Kind::kHsringPolling, Kind::kMutex, n));
  }
  for (uint32_t n : {1u, 4u}) {
    std::printf("ratio hsring/message_queue %ux%u: %.2fx (%.2fx)\n", n, n,
                ratio(Kind::kHsring, Kind::kMessageQueue, n),
                ratio(Kind::kHsringPolling, Kind::kMessageQueue, n));
  }
  std::printf("ratio hsring payload/memcpy: %.2fx\n", payload.ring_gbps / payload.memcpy_gbps);
}

struct CpuCostRow {
  Kind kind;
  double ns_per_message;
};

std::vector<CpuCostRow> run_cpu_costs(const Options& options) {
  ChannelShape shape;
  shape.capacity = options.capacity;
  shape.id_limit = options.round_trips;
  std::vector<CpuCostRow> rows;
  for (Kind kind : {Kind::kFloor, Kind::kHsring, Kind::kMutex, Kind::kMessageQueue}) {
    auto transport = make_transport(kind, "cpu" + std::to_string(int(kind)), shape);
    rows.push_back({kind, measure_cpu_cost(*transport, options.round_trips)});
  }
  return rows;
}

void print_cpu_costs(const Options& options, const std::vector<CpuCostRow>& rows) {
  std::printf(
      "\n4. CPU cost per message: one process sends a message and receives it back,\n"
      "   %u times; warm caches, no other process, nothing sleeps. Explains how much\n"
      "   of the figures above is the calls themselves.\n\n",
      options.round_trips);
  std::printf("   %-22s %14s\n", "transport", "send+receive");
  for (const CpuCostRow& row : rows) {
    std::printf("   %-22s %11.0f ns\n", row.kind == Kind::kHsring ? "hsring" : kind_label(row.kind),
                row.ns_per_message);
  }
}

void run(const Options& options) {
  std::printf("ring_bench%s: %u CPUs, load average %s\n", options.quick ? " --quick" : "",
              std::thread::hardware_concurrency(), load_average().c_str());
  const auto round_trips = run_round_trips(options);
  print_round_trips(options, round_trips);
  const Throughputs throughputs = run_throughputs(options);
  print_throughputs(options, throughputs);
  const PayloadResult payload = measure_payload(options.payload_slots, options.payload_tokens);
  print_payload(options, payload);
  print_cpu_costs(options, run_cpu_costs(options));
  print_ratios(round_trips, throughputs, payload);
}

}  // namespace
}  // namespace hsring::bench

int main(int argc, char** argv) {
  using hsring::bench::Options;
  Options options;
  CLI::App app{"Cross-process benchmark of the hsring ring against conventional queues"};
  app.add_flag("--quick", options.quick, "Short run for the smoke test (numbers meaningless)");
  app.add_option("--messages", options.messages, "Messages per throughput measurement")
      ->check(CLI::Range(4, 100'000'000));
  app.add_option("--round-trips", options.round_trips, "Timed round trips per transport")
      ->check(CLI::Range(10, 10'000'000));
  app.add_option("--reps", options.reps, "Throughput repetitions (median reported)")
      ->check(CLI::Range(1, 100));
  app.add_option("--payload-slots", options.payload_slots, "Slots moved in the payload test")
      ->check(CLI::Range(1, 100'000));
  app.add_option("--slots", options.capacity, "Slots (messages) of the small-message channels")
      ->check(CLI::Range(8, 4096));
  CLI11_PARSE(app, argc, argv);
  if (options.quick) {
    options.messages = 2'000;
    options.round_trips = 200;
    options.reps = 1;
    options.payload_slots = 6;
    options.payload_tokens = 256;  // 4 MiB slots
  }
  options.messages = (options.messages + 3) / 4 * 4;  // both topologies split it evenly

  try {
    hsring::bench::install_cleanup_handlers();
    if (int stale = hsring::bench::remove_stale_shm(); stale > 0) {
      std::printf("removed %d stale benchmark segment(s) of dead runs\n", stale);
    }
    hsring::bench::run(options);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "ring_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
