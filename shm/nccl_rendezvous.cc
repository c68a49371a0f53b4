#include "shm/nccl_rendezvous.h"

#include <atomic>
#include <cstring>

namespace hsring {

namespace {
constexpr int kWords = int(kNcclIdBytes / sizeof(uint64_t));
}  // namespace

void publish_nccl_id(RingHeader& header, uint32_t epoch, const unsigned char (&id)[kNcclIdBytes]) {
  header.nccl_epoch.store(0, std::memory_order_relaxed);
  uint64_t words[kWords];
  std::memcpy(words, id, sizeof words);
  // Release on each word: a reader whose acquire load returns one of them also sees
  // epoch 0 (or later) on its re-check, never the epoch of the id it replaces.
  for (int i = 0; i < kWords; ++i) header.nccl_id[i].store(words[i], std::memory_order_release);
  // Release: the words happen before a reader's acquire load that sees this epoch.
  header.nccl_epoch.store(epoch, std::memory_order_release);
}

bool read_nccl_id(const RingHeader& header, uint32_t epoch, unsigned char (&id)[kNcclIdBytes]) {
  // Acquire: pairs with the writer's release store of `epoch`.
  if (epoch == 0 || header.nccl_epoch.load(std::memory_order_acquire) != epoch) return false;
  uint64_t words[kWords];
  // Acquire: pairs with the release store of each word (no fences: ThreadSanitizer
  // checks this ordering, it cannot model a standalone fence).
  for (int i = 0; i < kWords; ++i) words[i] = header.nccl_id[i].load(std::memory_order_acquire);
  if (header.nccl_epoch.load(std::memory_order_relaxed) != epoch) return false;
  std::memcpy(id, words, sizeof words);
  return true;
}

}  // namespace hsring
