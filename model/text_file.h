// Reads a small text file (config.json, a shard index) whole.
#pragma once

#include <filesystem>
#include <string>

namespace hsring {

// Throws Error(kIo) naming the path and the reason when it cannot be read, and when it
// is larger than `max_bytes` (these files are kilobytes; a huge one is not what we expect).
std::string read_text_file(const std::filesystem::path& path, size_t max_bytes = 64u << 20);

}  // namespace hsring
