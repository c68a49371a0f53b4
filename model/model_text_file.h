// The model folder's small text files (config.json, the safetensors index, tokenizer.json),
// read whole and bounded, their errors of class model. (common/text_file.h writes and reads
// the run's own files; data/text_pack.h reads a corpus.)
#pragma once

#include <filesystem>
#include <string>

namespace hsring {

// Throws Error(kModel) naming the path and the reason when it cannot be read, and when it
// is larger than `max_bytes` (these files are kilobytes; a huge one is not what we expect).
std::string read_model_text_file(const std::filesystem::path& path, size_t max_bytes = 64u << 20);

}  // namespace hsring
