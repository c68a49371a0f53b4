// The NCCL id rendezvous in the ring header (shm/nccl_rendezvous.h): an id is read whole
// and only for the incarnation that published it, while a writer republishes as fast as
// it can. Meant for ThreadSanitizer as much as for the normal build.
#include "shm/nccl_rendezvous.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iterator>
#include <memory>
#include <thread>
#include <vector>

namespace hsring {
namespace {

using Id = unsigned char[kNcclIdBytes];

// The id incarnation `epoch` publishes: every byte depends on the epoch.
void id_of(uint32_t epoch, Id& id) {
  for (size_t i = 0; i < kNcclIdBytes; ++i)
    id[i] = (unsigned char)((epoch * 131u + i * 7u) & 0xFFu);
}

bool is_id_of(uint32_t epoch, const Id& id) {
  Id want;
  id_of(epoch, want);
  return std::equal(std::begin(id), std::end(id), std::begin(want));
}

TEST(NcclRendezvousTest, AnIdIsReadOnlyForTheIncarnationThatPublishedIt) {
  auto header = std::make_unique<RingHeader>();
  Id id;
  EXPECT_FALSE(read_nccl_id(*header, 1, id)) << "nothing published yet";
  EXPECT_FALSE(read_nccl_id(*header, 0, id)) << "epoch 0 is never an incarnation";
  Id three;
  id_of(3, three);
  publish_nccl_id(*header, 3, three);
  ASSERT_TRUE(read_nccl_id(*header, 3, id));
  EXPECT_TRUE(is_id_of(3, id));
  EXPECT_FALSE(read_nccl_id(*header, 2, id));
  EXPECT_FALSE(read_nccl_id(*header, 4, id)) << "incarnation 4 has not published";
  Id four;
  id_of(4, four);
  publish_nccl_id(*header, 4, four);
  EXPECT_FALSE(read_nccl_id(*header, 3, id)) << "a restarted drafter 0's old id is gone";
  ASSERT_TRUE(read_nccl_id(*header, 4, id));
  EXPECT_TRUE(is_id_of(4, id));
}

TEST(NcclRendezvousTest, ReadersNeverSeeATornIdWhileItIsRepublished) {
  auto header = std::make_unique<RingHeader>();
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> torn{0}, stale{0}, whole{0};
  std::thread writer([&] {
    Id id;
    for (uint32_t epoch = 1; !stop.load(std::memory_order_relaxed); ++epoch) {
      id_of(epoch, id);
      publish_nccl_id(*header, epoch, id);
    }
  });
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&] {
      Id id;
      while (!stop.load(std::memory_order_relaxed)) {
        const uint32_t epoch = header->nccl_epoch.load(std::memory_order_acquire);
        if (epoch == 0) continue;
        if (read_nccl_id(*header, epoch, id)) {
          (is_id_of(epoch, id) ? whole : torn).fetch_add(1, std::memory_order_relaxed);
        }
        // Epochs only grow: once `epoch` was seen, an older one is never current again.
        if (epoch > 1 && read_nccl_id(*header, epoch - 1, id)) stale.fetch_add(1);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  stop.store(true);
  writer.join();
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(torn.load(), 0u);
  EXPECT_EQ(stale.load(), 0u);
  EXPECT_GT(whole.load(), 0u) << "the readers never caught a published id";
  std::printf("[ rendezvous ] %llu whole reads, 0 torn\n", (unsigned long long)whole.load());
}

}  // namespace
}  // namespace hsring
