#include "gpu/cuda_check.h"

namespace hsring::gpu {

std::string describe_cuda_error(cudaError_t code, const char* call, const char* file, int line) {
  return std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
         cudaGetErrorString(code) + " (" + cudaGetErrorName(code) + ")";
}

void throw_cuda_error(cudaError_t code, const char* call, const char* file, int line) {
  throw CudaError(code, describe_cuda_error(code, call, file, line));
}

}  // namespace hsring::gpu
