#include "gpu/copy_events.h"

#include <cstring>
#include <mutex>

namespace hsring::gpu {

namespace {

using Key = std::array<unsigned char, kCopyEventBytes>;

Key key_of(const CopyEvent& handle) {
  Key key;
  std::memcpy(key.data(), handle.handle, kCopyEventBytes);
  return key;
}

// This process's own exported events by handle: cudaIpcOpenEventHandle refuses a handle
// from its own process, and a one-process pipeline (tests) must poll the same way.
struct LocalExports {
  std::mutex mutex;
  std::map<Key, cudaEvent_t> events;  // GUARDED_BY(mutex)
};
LocalExports& local_exports() {
  static LocalExports* exports = new LocalExports;  // never destroyed: used at exit
  return *exports;
}

}  // namespace

CopyEventPool::~CopyEventPool() {
  LocalExports& exports = local_exports();
  std::lock_guard lock(exports.mutex);
  for (size_t s = 0; s < events_.size(); ++s) {
    if (events_[s]) exports.events.erase(key_of(handles_[s]));
  }
}

CudaStatus CopyEventPool::record(uint32_t slot, cudaStream_t stream, CopyEvent& handle) {
  if (!events_[slot]) {
    cudaEvent_t event = nullptr;
    HSRING_CUDA_TRY(
        cudaEventCreateWithFlags(&event, cudaEventInterprocess | cudaEventDisableTiming));
    events_[slot] = Event(event);
    cudaIpcEventHandle_t exported;
    HSRING_CUDA_TRY(cudaIpcGetEventHandle(&exported, event));
    static_assert(sizeof exported == kCopyEventBytes, "the slot header holds one handle");
    std::memcpy(handles_[slot].handle, &exported, kCopyEventBytes);
    LocalExports& exports = local_exports();
    std::lock_guard lock(exports.mutex);
    exports.events[key_of(handles_[slot])] = event;
  }
  HSRING_CUDA_TRY(cudaEventRecord(events_[slot].get(), stream));
  handle = handles_[slot];
  return {};
}

CopyEventPoller::~CopyEventPoller() { clear(); }

void CopyEventPoller::clear() {
  // cudaEventDestroy of a dead exporter's event succeeds (measured: docs/gpu-data-path.md).
  for (auto& [key, event] : opened_) {
    if (event != nullptr) (void)cudaEventDestroy(event);
  }
  opened_.clear();
}

namespace {

// True when `event` has completed; false while it runs or when CUDA cannot say.
bool completed(cudaEvent_t event) {
  if (cudaEventQuery(event) == cudaSuccess) return true;
  (void)cudaGetLastError();  // cudaErrorNotReady is recorded as the last error
  return false;
}

}  // namespace

bool CopyEventPoller::poll(const PendingCopy& pending) {
  const Key key = key_of(pending.event);
  {
    // This process's own export (a one-process pipeline): looked up on every poll, never
    // cached, and queried under the table's lock, since its pool may destroy it (and
    // CUDA reuse its handle) at any time.
    LocalExports& exports = local_exports();
    std::lock_guard lock(exports.mutex);
    if (auto local = exports.events.find(key); local != exports.events.end())
      return completed(local->second);
  }
  auto it = opened_.find(key);
  if (it == opened_.end()) {
    if (opened_.size() >= kMaxOpened) clear();
    cudaIpcEventHandle_t handle;
    std::memcpy(&handle, pending.event.handle, kCopyEventBytes);
    cudaEvent_t event = nullptr;
    if (cudaIpcOpenEventHandle(&event, handle) != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: clear it for the next call's check
      event = nullptr;
    }
    it = opened_.emplace(key, event).first;  // a handle that failed stays failed
  }
  return it->second != nullptr && completed(it->second);
}

}  // namespace hsring::gpu
