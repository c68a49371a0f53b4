// The label of a token that is not a training target (the Hugging Face convention, -100):
// one value for the data's loss mask, the ring's label rows and the trainers' losses.
#pragma once

#include <cstdint>

namespace hsring {

// Every negative label is ignored the same way; this is the one the project writes.
inline constexpr int32_t kIgnoreLabel = -100;

}  // namespace hsring
