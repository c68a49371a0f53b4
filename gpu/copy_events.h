// CUDA IPC events for early publish (shm/copy_ticket.h, docs/gpu-data-path.md): a GPU
// target records one exported event per slot after the slot's D2H, and a GPU drafter polls
// it with cudaEventQuery before its H2D. Nothing here ever waits on an imported event,
// nor makes a stream wait on one (ring-protocol.md invariant 6): a dead exporter's event
// never completes.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <map>
#include <vector>

#include "gpu/cuda_check.h"
#include "gpu/cuda_handles.h"
#include "shm/copy_ticket.h"

namespace hsring::gpu {

// The exporter's side: one interprocess event per slot of the ring, made on first use.
// Thread safety: one thread records (the target's copier).
class CopyEventPool {
 public:
  explicit CopyEventPool(uint32_t slots) : events_(slots), handles_(slots) {}
  ~CopyEventPool();
  CopyEventPool(const CopyEventPool&) = delete;
  CopyEventPool& operator=(const CopyEventPool&) = delete;

  // Records slot `slot`'s event on `stream` (after the slot's copies) and gives its
  // exported handle, for the slot header. REQUIRES: slot < the pool's slot count.
  CudaStatus record(uint32_t slot, cudaStream_t stream, CopyEvent& handle);

 private:
  std::vector<Event> events_;
  std::vector<CopyEvent> handles_;
};

// The importer's side: opens each producer's event once (cudaIpcOpenEventHandle; an
// event exported by this very process, as in one-process tests, is found in a
// process-wide table instead, since CUDA opens no handle in its own exporter) and polls it.
// Thread safety: one thread (the drafter's loop).
class CopyEventPoller {
 public:
  CopyEventPoller() = default;
  ~CopyEventPoller();
  CopyEventPoller(const CopyEventPoller&) = delete;
  CopyEventPoller& operator=(const CopyEventPoller&) = delete;

  // True once the event `pending` names has completed. False while it runs, and for a
  // handle that cannot be opened or queried (bytes from the segment are untrusted; the
  // consumer then waits for the producer's settled ticket).
  bool poll(const PendingCopy& pending);

 private:
  using Key = std::array<unsigned char, kCopyEventBytes>;
  static constexpr size_t kMaxOpened = 4096;  // dead epochs' events are dropped past this
  void clear();                               // destroys every imported event
  std::map<Key, cudaEvent_t> opened_;         // imported events; nullptr: cannot be opened
};

}  // namespace hsring::gpu
