// What every CPU training model (the causal LM, the same-position and DFlash drafters) does
// alike with its numbers: sums in double (ops/sums.h), the backward's precision and the
// gradient checks', and at most kHeadRows rows of logits alive at once, which bounds the
// [rows, V] scratch to 256 V values (155 MB at a 151936-token vocabulary in fp32) however
// long the batch is.
#pragma once

#include <cstddef>

#include "ops/sums.h"

namespace hsring::train {

inline constexpr ops::Sums kTrainingSums = ops::Sums::kDouble;
inline constexpr size_t kHeadRows = 256;

}  // namespace hsring::train
