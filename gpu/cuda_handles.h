// Owning handles for CUDA objects: device memory, pinned host memory, streams and events.
// Each is created by a factory that throws Error(kCuda), so an invalid handle never exists,
// and freed in its destructor (errors there are ignored: nothing can be done about them).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "gpu/cuda_check.h"

namespace hsring::gpu {

// Move-only owner of a raw CUDA handle with a deleter.
template <class Handle, cudaError_t (*Destroy)(Handle)>
class UniqueCuda {
 public:
  UniqueCuda() = default;
  explicit UniqueCuda(Handle handle) : handle_(handle) {}
  UniqueCuda(UniqueCuda&& other) noexcept : handle_(std::exchange(other.handle_, Handle{})) {}
  UniqueCuda& operator=(UniqueCuda&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, Handle{});
    }
    return *this;
  }
  ~UniqueCuda() { reset(); }
  Handle get() const { return handle_; }
  explicit operator bool() const { return handle_ != Handle{}; }
  void reset() {
    if (handle_ != Handle{}) (void)Destroy(handle_);
    handle_ = Handle{};
  }

 private:
  Handle handle_{};
};

using Stream = UniqueCuda<cudaStream_t, cudaStreamDestroy>;
using Event = UniqueCuda<cudaEvent_t, cudaEventDestroy>;

// A stream that does not synchronise with the legacy default stream.
inline Stream make_stream() {
  cudaStream_t stream = nullptr;
  HSRING_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return Stream(stream);
}

// Timing events by default; cudaEventBlockingSync makes a waiting thread sleep, not spin.
inline Event make_event(unsigned flags = cudaEventDefault) {
  cudaEvent_t event = nullptr;
  HSRING_CUDA_CHECK(cudaEventCreateWithFlags(&event, flags));
  return Event(event);
}

// The two allocators of CudaBuffer: each with its partner that frees, and its name for
// an error message.
struct DeviceMemory {
  static cudaError_t allocate(void** p, size_t bytes) { return cudaMalloc(p, bytes); }
  static cudaError_t free(void* p) { return cudaFree(p); }
  static constexpr const char* kAllocator = "cudaMalloc";
};
struct PinnedMemory {
  static cudaError_t allocate(void** p, size_t bytes) { return cudaMallocHost(p, bytes); }
  static cudaError_t free(void* p) { return cudaFreeHost(p); }
  static constexpr const char* kAllocator = "cudaMallocHost";
};

// Bytes from one CUDA allocator, given back to its partner.
template <class Memory>
class CudaBuffer {
 public:
  CudaBuffer() = default;
  static CudaBuffer allocate(size_t bytes) {
    void* p = nullptr;
    if (bytes > 0) {
      if (const cudaError_t error = Memory::allocate(&p, bytes); error != cudaSuccess)
        throw_cuda_error(error, Memory::kAllocator, __FILE__, __LINE__);
    }
    return CudaBuffer(p, bytes);
  }
  std::byte* data() const { return static_cast<std::byte*>(memory_.get()); }
  template <class T>
  T* as() const {
    return reinterpret_cast<T*>(memory_.get());
  }
  size_t size() const { return bytes_; }

 private:
  CudaBuffer(void* p, size_t bytes) : memory_(p), bytes_(bytes) {}
  UniqueCuda<void*, Memory::free> memory_;
  size_t bytes_ = 0;
};

// Memory on the current device.
using DeviceBuffer = CudaBuffer<DeviceMemory>;
// Page-locked host memory from cudaMallocHost (small verdicts, benchmark baselines).
using PinnedBuffer = CudaBuffer<PinnedMemory>;

// Milliseconds between two completed events of one device; -1 when CUDA cannot say.
inline float elapsed_ms(cudaEvent_t from, cudaEvent_t to) {
  float ms = -1;
  if (cudaEventElapsedTime(&ms, from, to) != cudaSuccess) {
    (void)cudaGetLastError();  // clear it, so a later launch check does not report it
    return -1;
  }
  return ms;
}

}  // namespace hsring::gpu
