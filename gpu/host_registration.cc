#include "gpu/host_registration.h"

#include <fmt/format.h>

#include <cuda_runtime_api.h>

#include <cstdio>
#include <stdexcept>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "gpu/cuda_check.h"
#include "gpu/memlock.h"
#include "shm/ring.h"

namespace hsring::gpu {

std::unique_ptr<HostRegistration> HostRegistration::pin(void* base, size_t bytes,
                                                        const std::string& what) {
  if (std::string problem = memlock_problem(bytes, what); !problem.empty())
    throw Error(Errc::kCuda, problem);  // pinning for the GPU: the C API says HS_ERR_CUDA
  const uint64_t start = monotonic_ns();
  // Portable: registered for every CUDA context of this process, whichever device is current.
  const cudaError_t err = cudaHostRegister(base, bytes, cudaHostRegisterPortable);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    int device = -1;
    (void)cudaGetDevice(&device);
    throw cuda_error(err, fmt::format("cannot pin {} ({}) on GPU {} with cudaHostRegister: {} "
                                      "({}); this GPU or driver cannot register shared host "
                                      "memory, or the machine is short of lockable memory",
                                      what, human_bytes(bytes), device, cudaGetErrorString(err),
                                      cudaGetErrorName(err)));
  }
  const double seconds = double(monotonic_ns() - start) / 1e9;
  return std::unique_ptr<HostRegistration>(new HostRegistration(base, bytes, seconds));
}

HostRegistration::~HostRegistration() {
  if (cudaHostUnregister(base_) != cudaSuccess) (void)cudaGetLastError();
}

size_t ring_payload_bytes(const Ring& ring) {
  return size_t(ring.layout().slot.stride) * ring.slot_count();
}

std::unique_ptr<HostRegistration> pin_ring_payload(const Ring& ring) {
  // The payload starts on a page and every slot's stride is whole pages (kRegionAlign).
  void* base = ring.payload(0);
  const size_t bytes = ring_payload_bytes(ring);
  auto registration = HostRegistration::pin(base, bytes, "ring '" + ring.name() + "'");
  char line[160];
  std::snprintf(line, sizeof line,
                "pinned the ring's %u slot payloads (%s) with cudaHostRegister in %.3f s",
                ring.slot_count(), human_bytes(bytes).c_str(), registration->seconds());
  log_line(line);
  return registration;
}

}  // namespace hsring::gpu
