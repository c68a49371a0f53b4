// Comparing a GPU trainer's flat parameters (or gradients) with the CPU reference's, tensor
// by tensor: what the CUDA trainer tests share.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "train/param_layout.h"

namespace hsring::gpu_test {

// ||a - b|| / ||b|| over [offset, offset + size).
inline double relative_error(const std::vector<float>& a, std::span<const float> b, size_t offset,
                             size_t size) {
  double diff = 0, norm = 0;
  for (size_t i = offset; i < offset + size; ++i) {
    diff += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
    norm += double(b[i]) * double(b[i]);
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

// Every tensor of `gpu` within `tolerance` (relative L2) of `cpu`; prints the worst.
inline void expect_tensors_close(const train::ParamLayout& layout, const std::vector<float>& gpu,
                                 std::span<const float> cpu, double tolerance,
                                 const std::string& what) {
  double worst = 0;
  std::string worst_name;
  for (const train::ParamInfo& t : layout.tensors) {
    const double error = relative_error(gpu, cpu, t.offset, t.size);
    EXPECT_LE(error, tolerance) << what << " of " << t.name;
    if (error >= worst) {
      worst = error;
      worst_name = t.name;
    }
  }
  std::printf("[ cuda     ] %s: worst relative error %.2e (%s)\n", what.c_str(), worst,
              worst_name.c_str());
}

}  // namespace hsring::gpu_test
