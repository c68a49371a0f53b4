#include "gpu/gpu_ids.h"

namespace hsring::gpu {

std::string missing_gpu_problem(int id, int count, const std::string& why_none) {
  const std::string gpu = "GPU " + std::to_string(id);
  if (count <= 0)
    return gpu + " does not exist: this machine has no usable GPU (" + why_none +
           "); use cpu:N workers, or check the driver and CUDA_VISIBLE_DEVICES";
  if (id >= 0 && id < count) return "";
  const std::string range = count == 1 ? "0" : "0-" + std::to_string(count - 1);
  return gpu + " does not exist: this machine has " + std::to_string(count) +
         (count == 1 ? " GPU (" : " GPUs (") + range + ")";
}

}  // namespace hsring::gpu
