#include "gpu/gpu_ids.h"

#include <fmt/format.h>

namespace hsring::gpu {

std::string missing_gpu_problem(int id, int count, const std::string& why_none) {
  if (count <= 0)
    return fmt::format(
        "GPU {} does not exist: this machine has no usable GPU ({}); use cpu:N workers, or check "
        "the driver and CUDA_VISIBLE_DEVICES",
        id, why_none);
  if (id >= 0 && id < count) return "";
  if (count == 1) return fmt::format("GPU {} does not exist: this machine has 1 GPU (0)", id);
  return fmt::format("GPU {} does not exist: this machine has {} GPUs (0-{})", id, count,
                     count - 1);
}

}  // namespace hsring::gpu
