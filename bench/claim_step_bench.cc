// claim_step_bench: where one message's CPU time goes on the ring, step by step, in one
// process with warm caches (bench/RESULTS.md, "claim steps"). Each step runs over every
// slot of a 64-slot ring in turn; the loop's time over the slot count is the step's cost.
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/clock.h"
#include "shm/consumer.h"
#include "shm/producer.h"
#include "shm/ring.h"

using namespace hsring;

namespace {

// One process owns the ring: a lost slot is a bug, not a race.
void check(SlotResult result) {
  if (result.lost()) {
    std::fprintf(stderr, "claim_step_bench: a slot was lost\n");
    std::abort();
  }
}

}  // namespace

int main() {
  RingShape shape;
  shape.slot_count = 64;
  shape.max_tokens = 1;
  shape.hidden_size = 1;
  shape.num_layers = 1;
  shape.num_targets = 1;
  shape.num_drafters = 1;
  shape.ledger_capacity = 1u << 22;
  const std::string name = "claim-step-bench-" + std::to_string(::getpid());
  auto ring = Ring::create(name, shape);
  const Identity target{0, 1}, drafter{1, 1};
  const char* names[] = {"claim_free_slot", "bind_batch", "publish", "claim_ready_slot",
                         "release_consumed"};
  double total[5] = {};
  constexpr int kRounds = 20000;
  constexpr int kWarmupRounds = kRounds / 10;  // not timed
  SlotClaim held[64];
  uint64_t rng = 1, batch = 0;
  for (int round = 0; round < kRounds; ++round) {
    uint64_t t[6];
    t[0] = monotonic_ns();
    for (uint32_t i = 0; i < 64; ++i) held[i] = *claim_free_slot(*ring, target, i, {});
    t[1] = monotonic_ns();
    for (uint32_t i = 0; i < 64; ++i) check(bind_batch(*ring, held[i], (batch + i) % (1u << 22)));
    t[2] = monotonic_ns();
    for (uint32_t i = 0; i < 64; ++i)
      check(publish(*ring, held[i], BatchInfo{(batch + i) % (1u << 22), 1, 1, 0}));
    t[3] = monotonic_ns();
    for (uint32_t i = 0; i < 64; ++i) held[i] = *claim_ready_slot(*ring, drafter, 1, {}, rng);
    t[4] = monotonic_ns();
    for (uint32_t i = 0; i < 64; ++i) check(release_consumed(*ring, held[i]));
    t[5] = monotonic_ns();
    batch += 64;
    if (round >= kWarmupRounds)
      for (int s = 0; s < 5; ++s) total[s] += double(t[s + 1] - t[s]);
  }
  const double per = double(kRounds - kWarmupRounds) * 64;
  double sum = 0;
  for (int s = 0; s < 5; ++s) {
    std::printf("%-18s %7.1f ns\n", names[s], total[s] / per);
    sum += total[s] / per;
  }
  std::printf("%-18s %7.1f ns (64 slots, mean over the ring's fill levels)\n", "message", sum);
  Ring::remove(name);
}
