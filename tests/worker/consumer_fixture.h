// What the consumer-path tests share: a tiny ring with one target and one drafter session
// (each on its own attach, so destroying a session is its process's death), the drafter's
// BatchConsumer, and a publisher of synthetic batches.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "shm/copy_ticket.h"
#include "shm/producer.h"
#include "tests/shm/ring_test_util.h"
#include "worker/batch_consumer.h"
#include "worker/synthetic_batch.h"

namespace hsring::test {

class ConsumerFixture : public ::testing::Test {
 protected:
  static constexpr uint32_t kTarget0 = 0, kDrafter0 = 2;

  ConsumerFixture(const char* ring_name, uint64_t seed) : name_(ring_name), seed_(seed) {}

  void SetUp() override {
    ring_ = Ring::create(name_.str(), shape_);
    target_ = start(kTarget0);
    drafter_ = start(kDrafter0);
    consumer_ = std::make_unique<BatchConsumer>(*drafter_, seed_);
  }

  // A new incarnation of worker `index`, as a separate process would start it.
  std::unique_ptr<WorkerSession> start(uint32_t index) {
    const Role role = index < shape_.num_targets ? Role::kTarget : Role::kDrafter;
    return WorkerSession::start(Ring::attach(name_.str()), index, role,
                                std::chrono::milliseconds(0));
  }
  // Publishes synthetic batch `batch_id` from target_ (early: with its copy pending, the
  // ticket stored in *ticket); returns its slot.
  uint32_t produce(uint64_t batch_id, const CopyEvent* early = nullptr,
                   uint64_t* ticket = nullptr) {
    ClaimResult claim =
        claim_free_slot(target_->ring(), target_->identity(), 0, std::chrono::milliseconds(0));
    EXPECT_TRUE(claim);
    EXPECT_TRUE(bind_batch(target_->ring(), *claim, batch_id).ok());
    const BatchPlan plan = plan_batch(batch_id, shape_);
    fill_synthetic_batch(target_->ring(), claim->index, plan);
    EXPECT_TRUE(publish(target_->ring(), *claim,
                        BatchInfo{batch_id, plan.token_count, plan.num_docs, plan.length_bucket},
                        early, ticket)
                    .ok());
    return claim->index;
  }
  SlotState word(uint32_t slot) const { return SlotState(ring_->slot(slot).state.load()); }

  RingShape shape_ = tiny_shape();
  ScopedRingName name_;
  uint64_t seed_;
  std::unique_ptr<Ring> ring_;  // the creator's mapping: an observer and recoverer
  std::unique_ptr<WorkerSession> target_, drafter_;
  std::unique_ptr<BatchConsumer> consumer_;
};

}  // namespace hsring::test
