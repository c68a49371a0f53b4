#include "common/dtype.h"

namespace hsring {

uint32_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return 2;
    case DType::kFP16:
      return 2;
    case DType::kFP32:
      return 4;
  }
  return 0;
}

const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return "bf16";
    case DType::kFP16:
      return "fp16";
    case DType::kFP32:
      return "fp32";
  }
  return "invalid";
}

}  // namespace hsring
