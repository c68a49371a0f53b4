// What the CUDA target-model tests share (cuda_model_test.cc, cuda_moe_test.cc): the weights
// the GPU holds, as host weights the CPU reference can run, and the error measure both
// compare with.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "model/float_convert.h"
#include "model/model_config.h"
#include "model/model_weights.h"

namespace hsring::gpu_test {

// The weights the GPU holds: every matrix rounded to bf16, norms as they are.
inline ModelWeights bf16_weights(const ModelConfig& c, const ModelWeights& w) {
  ModelWeights rounded;
  const std::vector<WeightTensor> targets = weight_tensors(c, rounded);
  size_t i = 0;
  for_each_weight(
      c, w,
      [&](const std::string&, const std::vector<int64_t>& shape, const std::vector<float>& values) {
        std::vector<float>& out = *targets[i++].data;
        out = values;
        if (shape.size() > 1)
          for (float& v : out) v = hsring::bf16_to_float(hsring::float_to_bf16(v));
      });
  return rounded;
}

// ||got - want|| / ||want|| over all values, in double.
inline double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    norm += double(want[i]) * want[i];
  }
  return std::sqrt(diff / norm);
}

}  // namespace hsring::gpu_test
