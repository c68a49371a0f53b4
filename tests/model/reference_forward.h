// An independent, naive forward for one document, in double precision, written from the
// model's definition and sharing no code with model/: what the CPU reference is checked
// against.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_config.h"
#include "model/model_weights.h"

namespace hsring::test {

struct ReferenceResult {
  std::vector<std::vector<std::vector<double>>> layer_outputs;  // [L][t][H]
  std::vector<std::vector<double>> logits;                      // [t][V]
};

ReferenceResult reference_forward(const ModelConfig& config, const ModelWeights& weights,
                                  const std::vector<int32_t>& tokens,
                                  const std::vector<int32_t>& positions);

}  // namespace hsring::test
