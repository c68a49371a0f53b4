// Exports named fp32 tensors (a trained drafter's weights) as a .safetensors file: an
// 8-byte little-endian header length, a JSON header of {name: {dtype, shape,
// data_offsets}} with an optional "__metadata__" map of strings, then the tensors' bytes,
// back to back in the order given. Written atomically, like a checkpoint.
#pragma once

#include <map>
#include <span>
#include <string>

#include "checkpoint/atomic_file.h"
#include "checkpoint/checkpoint_format.h"

namespace hsring::checkpoint {

enum class ExportDtype {
  kF32,   // the values exactly
  kBF16,  // rounded to nearest, ties to even, as torch's .to(torch.bfloat16)
};

struct ExportOptions {
  ExportDtype dtype = ExportDtype::kF32;
  std::map<std::string, std::string> metadata;  // "__metadata__"; UTF-8 strings
  WriteOptions io;
};

// Writes `tensors` to `path` (temporary, fsync, rename, directory fsync). Throws
// Error: bad checkpoint for names that are empty, duplicate, "__metadata__" or
// not UTF-8, or data that does not fill a shape (nothing is written); no space, I/O.
void export_safetensors(const std::string& path, std::span<const Tensor> tensors,
                        const ExportOptions& options = {});

}  // namespace hsring::checkpoint
