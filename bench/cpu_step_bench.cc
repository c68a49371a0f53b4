// cpu_step_bench: one CPU DFlash drafter training step (train/dflash_trainer.h, the step a
// CPU drafter takes on every batch) at the default job's shape: the drafter of --model
// (default_dflash_config: K captured layers, default_draft_layers of its shape) over a
// batch of --tokens rows in documents of --doc tokens, default anchors; the median wall
// time of compute_gradients + apply_gradients over --steps after one warm-up step. Also
// the median wall time of one parallel_for (common/parallel.h) over --threads chunks that
// each busy-wait --chunk-us: what is above chunk_us is the fixed price every parallel
// region of the step pays. Prints one
// `key=value` line per figure (bench/RESULTS.md, "cpu_step_bench").
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "bench/bench_stats.h"
#include "common/parallel.h"
#include "common/random.h"
#include "model/model_config.h"
#include "train/dflash_config.h"
#include "train/dflash_trainer.h"

namespace hsring {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<float> uniform_floats(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  for (float& x : v) x = float(double(splitmix64(seed) >> 11) * 0x1p-53 * 2 - 1);
  return v;
}

int run(int argc, char** argv) {
  std::string model = "tiny";
  uint32_t tokens = 512, doc = 128, steps = 20, threads = 0, captured = 5, calls = 5000;
  double chunk_us = 20;
  CLI::App app{"cpu_step_bench: the CPU DFlash step and the cost of one parallel_for"};
  app.add_option("--model", model, "Target preset whose drafter is trained");
  app.add_option("--tokens", tokens, "Rows of the batch")->check(CLI::PositiveNumber);
  app.add_option("--doc", doc, "Tokens per document")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "Timed steps")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "Compute threads (0: every hardware thread)");
  app.add_option("--calls", calls, "Timed parallel_for calls")->check(CLI::PositiveNumber);
  app.add_option("--chunk-us", chunk_us, "Busy time of each chunk of a timed parallel_for");
  CLI11_PARSE(app, argc, argv);
  threads = resolve_threads(threads);

  // What one parallel region costs beyond its work: `threads` chunks that each busy-wait
  // --chunk-us, so a region would take chunk_us with no overhead at all.
  std::vector<double> call_s;
  const auto chunk = std::chrono::duration<double, std::micro>(chunk_us);
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = Clock::now();
    for (uint32_t i = 0; i < calls; ++i)
      parallel_for(threads, threads, 1, [chunk](size_t, size_t) {
        const auto begin = Clock::now();
        while (Clock::now() - begin < chunk) {
        }
      });
    call_s.push_back(seconds_since(start) / calls);
  }
  bench::print("threads", threads, "%.0f");
  bench::print("chunk_us", chunk_us);
  bench::print("parallel_for_us", bench::median(call_s) * 1e6);

  const ModelConfig target = named_model_config(model);
  train::DflashTrainerOptions o;
  o.model = train::default_dflash_config(target, std::min(captured, target.num_layers),
                                         train::default_draft_layers(target));
  o.threads = threads;
  o.seed = 1;
  const size_t width = size_t(target.vocab_size) * o.model.width();
  o.embed = uniform_floats(width, 2);
  o.lm_head = uniform_floats(width, 3);
  train::DflashTrainer trainer(o);

  std::vector<float> features = uniform_floats(size_t(tokens) * o.model.feature_dim(), 4);
  std::vector<int32_t> ids(tokens), positions(tokens), labels(tokens), offsets{0};
  uint64_t state = 5;
  for (uint32_t t = 0; t < tokens; ++t) {
    ids[t] = int32_t(splitmix64(state) % (target.vocab_size - 1));
    positions[t] = int32_t(t - offsets.back());
    if (positions[t] + 1 == int32_t(doc) || t + 1 == tokens) offsets.push_back(int32_t(t + 1));
  }
  for (uint32_t t = 0; t < tokens; ++t) labels[t] = t + 1 < tokens ? ids[t + 1] : kIgnoreLabel;
  const train::DrafterBatch batch{features, ids, positions, offsets, labels};

  std::vector<double> step_s;
  for (uint32_t s = 0; s <= steps; ++s) {
    const auto start = Clock::now();
    trainer.compute_gradients(batch);
    trainer.apply_gradients();
    if (s > 0) step_s.push_back(seconds_since(start));  // step 0 warms the caches
  }
  std::printf("drafter=%s\n", train::describe(o.model).c_str());
  bench::print("tokens", tokens, "%.0f");
  bench::print("step_ms", bench::median(step_s) * 1e3);
  bench::print("step_ms_min", *std::min_element(step_s.begin(), step_s.end()) * 1e3);
  return 0;
}

}  // namespace
}  // namespace hsring

int main(int argc, char** argv) { return hsring::run(argc, argv); }
