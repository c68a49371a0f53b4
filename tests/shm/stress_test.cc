// Thread stress of the whole protocol: target and drafter threads run claim -> bind ->
// fill -> publish -> claim -> verify -> release for a few seconds; afterwards every batch
// must have been consumed exactly once and intact, by the test's own count and by the
// ledger's. Meant for ThreadSanitizer as much as for the normal build.
//
// Each thread is a worker: it attaches its own Ring (its own mapping and open file
// description, so liveness works per thread as it does per process) and starts a
// WorkerSession. Destroying the session is the thread's "death": the kernel drops its
// liveness lock as it would at process death. One variant shares a single mapping
// instead: TSan tracks memory by address, so only then can it check each payload hand-off
// against the protocol's release/acquire CAS pairs.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <latch>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>

#include "common/clock.h"
#include "shm/consumer.h"
#include "shm/ledger.h"
#include "shm/producer.h"
#include "shm/recovery.h"
#include "shm/worker_session.h"
#include "tests/shm/ring_test_util.h"
#include "worker/synthetic_batch.h"

namespace hsring {
namespace {

using namespace std::chrono_literals;

// Seconds each timed stress runs: HSRING_STRESS_SECONDS, else 2 (TSan included: the runs
// are time-bounded, a slower build just does fewer batches).
double stress_seconds() {
  if (const char* value = std::getenv("HSRING_STRESS_SECONDS")) return std::atof(value);
  return 2.0;
}

RingShape stress_shape(uint32_t targets, uint32_t drafters) {
  RingShape shape;
  shape.slot_count = 16;
  shape.max_tokens = 16;
  shape.hidden_size = 8;
  shape.num_layers = 2;
  shape.dtype = DType::kBF16;
  shape.num_targets = targets;
  shape.num_drafters = drafters;
  shape.hs_min_ready = 2;
  shape.ledger_capacity = 1u << 22;  // far more than a few seconds can produce
  shape.batch_limit = shape.ledger_capacity;
  return shape;
}

struct Options {
  bool shared_mapping = false;  // all workers on the creator's mapping, no sessions
  bool recoverer = false;       // a thread running recover_dead_owners all the time
  bool deaths = false;          // workers die at random points and are restarted
};

class StressTest : public ::testing::Test {
 protected:
  void create(const RingShape& shape) {
    shape_ = shape;
    ring_ = Ring::create(name_.str(), shape);
  }

  // One incarnation of a worker: its own session on its own attach, or (shared mapping)
  // the creator's mapping and a hand-made identity.
  struct Worker {
    std::unique_ptr<WorkerSession> session;
    Ring* ring = nullptr;
    Identity self;
    void heartbeat() {
      if (session) session->heartbeat();  // also recovers dead peers, as workers do
    }
  };
  Worker start_worker(uint32_t index) {
    Worker w;
    if (options_.shared_mapping) {
      w.ring = ring_.get();
      w.self = Identity{index, ring_->process(index).epoch.fetch_add(1) + 1};
    } else {
      const Role role = index < shape_.num_targets ? Role::kTarget : Role::kDrafter;
      w.session = WorkerSession::start(Ring::attach(name_.str()), index, role, 1s);
      w.ring = &w.session->ring();
      w.self = w.session->identity();
    }
    return w;
  }

  void fail(const std::string& what) {
    std::lock_guard<std::mutex> lock(errors_mutex_);
    errors_.push_back(what);
    abort_.store(true);
  }

  bool write_and_publish(Ring& ring, SlotClaim& claim) {
    const uint64_t id = ring.slot(claim.index).batch_id.load(std::memory_order_relaxed);
    const BatchPlan plan = plan_batch(id, shape_);
    fill_synthetic_batch(ring, claim.index, plan);
    return publish(ring, claim, BatchInfo{id, plan.token_count, plan.num_docs, plan.length_bucket})
        .ok();
  }

  // Target t produces its shard t, t+T, ... until the deadline. With deaths, each
  // incarnation dies after a random number of batches at a random step, and the next one
  // takes over the way TargetWorker does: adopt the unpublished writes, write them again,
  // continue from the shard position.
  void target_thread(uint32_t t, uint64_t deadline_ns) {
    std::mt19937_64 rng(t + 1);
    const BatchShard shard{t, shape_.num_targets};
    try {
      for (bool done = false; !done;) {
        Worker w = start_worker(t);
        Ring& ring = *w.ring;
        TargetProgress& progress = ring.target_progress(t);
        std::vector<SlotClaim> adopted = adopt_previous_writes(ring, w.self);
        uint64_t next_seq = progress.next_seq.load(std::memory_order_acquire);
        for (const SlotClaim& claim : adopted) {
          next_seq = std::max(next_seq, shard.seq_of(ring.slot(claim.index).batch_id.load()) + 1);
        }
        progress.next_seq.store(next_seq, std::memory_order_release);
        for (SlotClaim& claim : adopted) {
          if (!write_and_publish(ring, claim)) return fail("an adopted slot was taken away");
        }
        const uint64_t lifetime = options_.deaths ? rng() % 100 : UINT64_MAX;
        const uint64_t death_step = rng() % 4;
        for (uint64_t n = 0;;) {
          const uint64_t id = shard.batch_id(next_seq);
          if (monotonic_ns() >= deadline_ns || abort_.load() || id >= shape_.batch_limit) {
            done = true;
            break;
          }
          auto claim = claim_free_slot(ring, w.self, uint32_t(next_seq * 7 + t), 20ms);
          if (!claim) continue;
          const bool dying = n++ == lifetime;
          if (dying && death_step == 0) break;  // holding a CLAIMED slot
          if (!bind_batch(ring, *claim, id)) return fail("target lost its CLAIMED slot");
          if (dying && death_step == 1) break;  // WRITING, shard position not stored yet
          progress.next_seq.store(++next_seq, std::memory_order_release);
          if (dying && death_step == 2) break;  // WRITING, payload not written
          if (dying) {                          // WRITING, payload written, not published
            fill_synthetic_batch(ring, claim->index, plan_batch(id, shape_));
            break;
          }
          if (!write_and_publish(ring, *claim)) return fail("target lost its WRITING slot");
          if (n % 64 == 0) w.heartbeat();
        }
        if (!done) ++target_deaths_[std::min<uint64_t>(death_step, 1)];
      }  // the session ends here: a death, or the last incarnation's clean exit
    } catch (const std::exception& e) {
      fail("target " + std::to_string(t) + ": " + e.what());
    }
    ring_->target_progress(t).exhausted.store(1, std::memory_order_release);
    // The published total before "done": whoever sees every target done sees the total.
    produced_total_.fetch_add(ring_->target_progress(t).next_seq.load());
    targets_done_.fetch_add(1);
  }

  bool everything_consumed() const {
    return targets_done_.load() == shape_.num_targets &&
           consumed_total_.load() == produced_total_.load();
  }

  // Drafter d consumes and verifies until every published batch is consumed. With deaths,
  // each incarnation dies holding a READING slot after a random number of batches.
  void drafter_thread(uint32_t d, std::vector<uint64_t>& ids) {
    std::mt19937_64 rng(100 + d);
    uint64_t pick_state = 0xC0FFEE + d;
    try {
      for (bool done = false; !done;) {
        Worker w = start_worker(shape_.num_targets + d);
        const uint64_t lifetime = options_.deaths ? rng() % 100 : UINT64_MAX;
        for (uint64_t n = 0;;) {
          if (abort_.load()) {
            done = true;
            break;
          }
          auto claim = claim_ready_slot(*w.ring, w.self, shape_.hs_min_ready, 20ms, pick_state);
          if (!claim) {
            if (everything_consumed()) {
              done = true;
              break;
            }
            continue;
          }
          if (n++ == lifetime) {  // dies while READING: the batch must come back
            ++drafter_deaths_;
            break;
          }
          const uint64_t id = w.ring->slot(claim->index).batch_id.load(std::memory_order_relaxed);
          if (std::string problem = verify_synthetic_batch(*w.ring, claim->index); !problem.empty())
            fail("drafter " + std::to_string(d) + " read a torn slot: " + problem);
          ids.push_back(id);
          if (!release_consumed(*w.ring, *claim)) return fail("drafter lost its READING slot");
          consumed_total_.fetch_add(1);
          if (n % 64 == 0) w.heartbeat();
        }
      }
    } catch (const std::exception& e) {
      fail("drafter " + std::to_string(d) + ": " + e.what());
    }
  }

  // Runs the workers (and the recoverer) to completion.
  void run(const Options& options) {
    options_ = options;
    const uint64_t deadline = monotonic_ns() + uint64_t(stress_seconds() * 1e9);
    consumed_.assign(shape_.num_drafters, {});
    std::atomic<bool> workers_done{false};
    std::thread recoverer;
    if (options.recoverer) {
      recoverer = std::thread([&] {
        try {
          auto ring = Ring::attach(name_.str());
          while (!workers_done.load()) {
            const RecoveryStats stats = recover_dead_owners(*ring);
            recovered_by_recoverer_.freed += stats.freed;
            recovered_by_recoverer_.redelivered += stats.redelivered;
            recovered_by_recoverer_.orphaned += stats.orphaned;
          }
        } catch (const std::exception& e) {
          fail(std::string("recoverer: ") + e.what());
        }
      });
    }
    std::vector<std::thread> threads;
    for (uint32_t t = 0; t < shape_.num_targets; ++t)
      threads.emplace_back([this, t, deadline] { target_thread(t, deadline); });
    for (uint32_t d = 0; d < shape_.num_drafters; ++d)
      threads.emplace_back([this, d] { drafter_thread(d, consumed_[d]); });
    // A safety net, not a speed check: a broken protocol must fail the test, not hang it.
    std::thread watchdog([&] {
      const uint64_t give_up = deadline + 60'000'000'000ull;
      while (!workers_done.load() && monotonic_ns() < give_up) std::this_thread::sleep_for(10ms);
      if (!workers_done.load()) fail("workers did not finish within 60 s of the deadline");
    });
    for (std::thread& thread : threads) thread.join();
    workers_done.store(true);
    watchdog.join();
    if (recoverer.joinable()) recoverer.join();
  }

  // Every published batch id consumed exactly once and intact; nothing left in the ring.
  void expect_exactly_once() {
    for (const std::string& error : errors_) ADD_FAILURE() << error;
    const uint32_t targets = shape_.num_targets;
    std::vector<uint64_t> produced(targets);
    for (uint32_t t = 0; t < targets; ++t) produced[t] = ring_->target_progress(t).next_seq.load();
    const uint64_t total = std::accumulate(produced.begin(), produced.end(), uint64_t{0});
    std::printf(
        "[ stress   ] %llu batches published and consumed; deaths: %llu CLAIMED, "
        "%llu WRITING, %llu READING\n",
        (unsigned long long)total, (unsigned long long)target_deaths_[0].load(),
        (unsigned long long)target_deaths_[1].load(), (unsigned long long)drafter_deaths_.load());
    // A run that never wraps the ring proves nothing about slot reuse.
    ASSERT_GT(total, 4u * shape_.slot_count);
    const uint64_t id_limit = *std::max_element(produced.begin(), produced.end()) * targets;
    std::vector<uint32_t> times(id_limit, 0);
    uint64_t consumed = 0;
    for (const auto& ids : consumed_) {
      for (uint64_t id : ids) {
        ASSERT_LT(id, id_limit) << "consumed a batch id that was never published";
        ++times[id];
        ++consumed;
      }
    }
    EXPECT_EQ(consumed, total);
    uint64_t wrong = 0;
    for (uint32_t t = 0; t < targets; ++t) {
      for (uint64_t seq = 0; seq < produced[t]; ++seq) {
        const uint64_t id = seq * targets + t;
        if (times[id] != 1 && wrong++ < 10)
          ADD_FAILURE() << "batch " << id << " consumed " << times[id] << " times";
        times[id] = 0;
      }
    }
    EXPECT_EQ(wrong, 0u);
    EXPECT_EQ(std::count_if(times.begin(), times.end(), [](uint32_t n) { return n != 0; }), 0)
        << "consumed ids outside the targets' shards";

    const LedgerTotals totals = ledger_totals(*ring_, id_limit);
    EXPECT_EQ(totals.published, total);
    EXPECT_EQ(totals.consumed, total);
    EXPECT_EQ(totals.duplicated, 0u);
    EXPECT_EQ(totals.lost, 0u);
    EXPECT_EQ(totals.torn, 0u);
    EXPECT_EQ(totals.in_ring, 0u);
    // A batch is redelivered only when a drafter died holding it.
    EXPECT_LE(totals.redelivered, drafter_deaths_.load());
    if (drafter_deaths_.load() > 0) {
      EXPECT_GT(totals.redelivered, 0u);
    }
    for (uint32_t i = 0; i < shape_.slot_count; ++i)
      EXPECT_EQ(SlotState(ring_->slot(i).state.load()).phase(), SlotPhase::kFree) << "slot " << i;
  }

  // Every slot a dead incarnation left was recovered or adopted exactly once, whoever
  // (recoverer, peer heartbeat, restart) got there first; no live slot ever was.
  void expect_recoveries_match_deaths() {
    EXPECT_EQ(ring_->header().slots_recovered.load(), target_deaths_[0] + drafter_deaths_.load())
        << "CLAIMED and READING slots of the dead, each recovered once";
    EXPECT_EQ(ring_->header().slots_adopted.load(), target_deaths_[1])
        << "WRITING slots of the dead, each adopted once";
  }

  test::ScopedRingName name_{"stress"};
  RingShape shape_;
  std::unique_ptr<Ring> ring_;
  Options options_;
  std::vector<std::vector<uint64_t>> consumed_;  // batch ids, per drafter
  std::mutex errors_mutex_;
  std::vector<std::string> errors_;
  RecoveryStats recovered_by_recoverer_;  // written by the recoverer thread only
  std::atomic<bool> abort_{false};
  std::atomic<uint32_t> targets_done_{0};
  std::atomic<uint64_t> produced_total_{0};
  std::atomic<uint64_t> consumed_total_{0};
  // Target deaths holding a CLAIMED slot [0], or a WRITING one [1]; drafter deaths.
  std::atomic<uint64_t> target_deaths_[2] = {0, 0};
  std::atomic<uint64_t> drafter_deaths_{0};
};

TEST_F(StressTest, SharedMappingEveryBatchConsumedExactlyOnce) {
  create(stress_shape(3, 3));
  run({.shared_mapping = true});
  expect_exactly_once();
}

TEST_F(StressTest, PerThreadRingsEveryBatchConsumedExactlyOnce) {
  create(stress_shape(3, 3));
  run({});
  expect_exactly_once();
  expect_recoveries_match_deaths();  // no deaths: nothing recovered, by peers or anyone
}

TEST_F(StressTest, MoreConsumersThanSlotsCanFeed) {
  // Drafters contend for few READY slots: lost claim races, futex sleeps and wakes.
  RingShape shape = stress_shape(2, 6);
  shape.slot_count = 4;
  create(shape);
  run({});
  expect_exactly_once();
}

TEST_F(StressTest, RecovererNeverStealsSlotsOfLiveWorkers) {
  create(stress_shape(3, 3));
  run({.recoverer = true});
  expect_exactly_once();
  EXPECT_EQ(recovered_by_recoverer_.total(), 0u) << "the recoverer took slots of live workers";
  EXPECT_EQ(recovered_by_recoverer_.orphaned, 0u) << "a live target's write was taken as orphaned";
  expect_recoveries_match_deaths();
}

TEST_F(StressTest, WorkersThatDieAndRestartLoseAndDoubleNothing) {
  create(stress_shape(3, 3));
  run({.recoverer = true, .deaths = true});
  expect_exactly_once();
  expect_recoveries_match_deaths();
  EXPECT_GT(target_deaths_[0] + target_deaths_[1], 0u);
  EXPECT_GT(drafter_deaths_.load(), 0u);
}

// Several recoverers at once over the same dead owners' slots: each slot is recovered by
// exactly one of them (ring-protocol.md invariant 5: racing recoverers are harmless).
TEST_F(StressTest, RacingRecoverersRecoverEachDeadSlotOnce) {
  RingShape shape = stress_shape(2, 2);
  shape.slot_count = 32;
  create(shape);
  constexpr uint32_t kRecoverers = 4, kClaimed = 6, kReading = 6;
  const int rounds = test::kUnderTsan ? 30 : 200;
  auto live_target = WorkerSession::start(Ring::attach(name_.str()), 0, Role::kTarget, 1s);
  auto live_drafter = WorkerSession::start(Ring::attach(name_.str()), 2, Role::kDrafter, 1s);
  uint64_t next_id = 0, rng = 1;
  for (int round = 0; round < rounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    {  // Slots left behind by a target and a drafter that then die.
      auto doomed_target = WorkerSession::start(Ring::attach(name_.str()), 1, Role::kTarget, 1s);
      auto doomed_drafter = WorkerSession::start(Ring::attach(name_.str()), 3, Role::kDrafter, 1s);
      ASSERT_EQ(doomed_target->recovered_at_start().total(), 0u) << "recoverers left slots";
      ASSERT_EQ(doomed_drafter->recovered_at_start().total(), 0u) << "recoverers left slots";
      for (uint32_t i = 0; i < kReading; ++i) {
        auto claim = claim_free_slot(live_target->ring(), live_target->identity(), i, 0ms);
        ASSERT_TRUE(claim);
        ASSERT_TRUE(bind_batch(live_target->ring(), *claim, next_id++));
        ASSERT_TRUE(write_and_publish(live_target->ring(), *claim));
        ASSERT_TRUE(
            claim_ready_slot(doomed_drafter->ring(), doomed_drafter->identity(), 1, 0ms, rng));
      }
      for (uint32_t i = 0; i < kClaimed; ++i)
        ASSERT_TRUE(claim_free_slot(doomed_target->ring(), doomed_target->identity(), 0, 0ms));
    }

    std::atomic<uint32_t> freed{0}, redelivered{0};
    std::latch go(kRecoverers);
    std::vector<std::thread> recoverers;
    for (uint32_t r = 0; r < kRecoverers; ++r) {
      recoverers.emplace_back([&] {
        auto ring = Ring::attach(name_.str());
        go.arrive_and_wait();  // all at once, to race
        const RecoveryStats stats = recover_dead_owners(*ring);
        freed.fetch_add(stats.freed);
        redelivered.fetch_add(stats.redelivered);
      });
    }
    for (std::thread& thread : recoverers) thread.join();
    ASSERT_EQ(freed.load(), kClaimed);
    ASSERT_EQ(redelivered.load(), kReading);

    // Drain the redelivered batches so the next round starts from an empty ring.
    for (uint32_t i = 0; i < kReading; ++i) {
      auto claim = claim_ready_slot(live_drafter->ring(), live_drafter->identity(), 1, 0ms, rng);
      ASSERT_TRUE(claim);
      ASSERT_EQ(verify_synthetic_batch(live_drafter->ring(), claim->index), "");
      ASSERT_TRUE(release_consumed(live_drafter->ring(), *claim));
    }
    for (uint32_t i = 0; i < shape.slot_count; ++i)
      ASSERT_EQ(SlotState(ring_->slot(i).state.load()).phase(), SlotPhase::kFree);
  }
  const LedgerTotals totals = ledger_totals(*ring_, next_id);
  EXPECT_EQ(totals.consumed, next_id);
  EXPECT_EQ(totals.redelivered, next_id);
  EXPECT_EQ(totals.duplicated, 0u);
  EXPECT_EQ(totals.lost, 0u);
  EXPECT_EQ(ring_->header().slots_recovered.load(), uint64_t(rounds) * (kClaimed + kReading));
}

}  // namespace
}  // namespace hsring
