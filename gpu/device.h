// Which GPUs exist and whether each can do what a worker needs of it. The launcher runs
// these checks before it starts any worker; each worker runs them again for its own GPU
// (a worker may be started by hand or by systemd).
#pragma once

#include <string>
#include <vector>

namespace hsring::gpu {

struct GpuInventory {
  int count = 0;
  std::string why_none;  // when count is 0: what CUDA said
};

// The GPUs this process can see (CUDA_VISIBLE_DEVICES applies). Never throws.
GpuInventory probe_gpus();

// "" when GPU `id` exists and can register host memory, else a message such as
// "GPU 7 does not exist: this machine has 2 GPUs (0-1)".
std::string gpu_problem(int id);
std::string gpu_problem(int id, const GpuInventory& inventory);

// Checks `id` (throws Error(kUsage) with gpu_problem's message) and makes it the
// calling thread's current device.
void use_gpu(int id);

// "NVIDIA H200 (GPU 0, 132 SMs, 139.8 GiB)"; "" when CUDA cannot say.
std::string describe_gpu(int id);

}  // namespace hsring::gpu
