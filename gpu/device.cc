#include "gpu/device.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <stdexcept>

#include "common/error.h"
#include "gpu/cuda_check.h"
#include "gpu/gpu_ids.h"
#include "gpu/memlock.h"

namespace hsring::gpu {

GpuInventory probe_gpus() {
  GpuInventory inventory;
  const cudaError_t err = cudaGetDeviceCount(&inventory.count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    inventory.count = 0;
    inventory.why_none = std::string(cudaGetErrorString(err)) + " (" + cudaGetErrorName(err) + ")";
  } else if (inventory.count == 0) {
    inventory.why_none = "CUDA reports no devices";
  }
  return inventory;
}

std::string gpu_problem(int id) { return gpu_problem(id, probe_gpus()); }

std::string gpu_problem(int id, const GpuInventory& inventory) {
  if (std::string missing = missing_gpu_problem(id, inventory.count, inventory.why_none);
      !missing.empty())
    return missing;
  int can_register = 0;
  const cudaError_t err =
      cudaDeviceGetAttribute(&can_register, cudaDevAttrHostRegisterSupported, id);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return fmt::format("GPU {}: cannot query it: {}", id, cudaGetErrorString(err));
  }
  if (!can_register)
    return fmt::format(
        "GPU {} ({}) cannot register host memory (cudaDevAttrHostRegisterSupported is 0), which "
        "the ring's zero-copy DMA needs; run its worker on another GPU or as cpu:N",
        id, describe_gpu(id));
  return "";
}

void use_gpu(int id) {
  if (std::string problem = gpu_problem(id); !problem.empty()) throw Error(Errc::kUsage, problem);
  HSRING_CUDA_CHECK(cudaSetDevice(id));
}

std::string describe_gpu(int id) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, id) != cudaSuccess) {
    (void)cudaGetLastError();
    return "";
  }
  return fmt::format("{}, GPU {}, {} SMs, {}", prop.name, id, prop.multiProcessorCount,
                     human_bytes(prop.totalGlobalMem));
}

}  // namespace hsring::gpu
