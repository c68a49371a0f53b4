// The element types of hidden states, shared by the ring (what a slot carries), the models
// (what they compute in) and the GPU copies. The values are part of the ring's header
// format (docs/ring-protocol.md): never renumber them.
#pragma once

#include <cstdint>

namespace hsring {

enum class DType : uint32_t { kBF16 = 1, kFP16 = 2, kFP32 = 3 };
uint32_t dtype_size(DType dtype);  // 0 for an unknown value
const char* to_string(DType dtype);

}  // namespace hsring
