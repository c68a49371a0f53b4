#include "gpu/cuda_check.h"

#include <fmt/format.h>

namespace hsring::gpu {

std::string describe_cuda_error(cudaError_t code, const char* call, const char* file, int line) {
  return fmt::format("{} failed at {}:{}: {} ({})", call, file, line, cudaGetErrorString(code),
                     cudaGetErrorName(code));
}

void throw_cuda_error(cudaError_t code, const char* call, const char* file, int line) {
  throw cuda_error(code, describe_cuda_error(code, call, file, line));
}

}  // namespace hsring::gpu
