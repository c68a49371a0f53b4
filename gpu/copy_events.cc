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
  // cudaEventDestroy of a dead exporter's event succeeds (../shared/PLATFORM.md).
  for (auto& [key, opened] : opened_) {
    if (opened.imported) (void)cudaEventDestroy(opened.event);
  }
  opened_.clear();
}

bool CopyEventPoller::poll(const PendingCopy& pending) {
  const Key key = key_of(pending.event);
  auto it = opened_.find(key);
  if (it == opened_.end()) {
    if (opened_.size() >= kMaxOpened) clear();
    Opened opened;
    {
      LocalExports& exports = local_exports();
      std::lock_guard lock(exports.mutex);
      if (auto local = exports.events.find(key); local != exports.events.end())
        opened.event = local->second;
    }
    if (opened.event == nullptr) {
      cudaIpcEventHandle_t handle;
      std::memcpy(&handle, pending.event.handle, kCopyEventBytes);
      if (cudaIpcOpenEventHandle(&opened.event, handle) != cudaSuccess) {
        (void)cudaGetLastError();  // not sticky: clear it for the next call's check
        opened.event = nullptr;
      }
      opened.imported = opened.event != nullptr;
    }
    it = opened_.emplace(key, opened).first;  // a handle that failed stays failed
  }
  if (it->second.event == nullptr) return false;
  const cudaError_t state = cudaEventQuery(it->second.event);
  if (state == cudaSuccess) return true;
  (void)cudaGetLastError();  // cudaErrorNotReady is recorded as the last error
  return false;
}

}  // namespace hsring::gpu
