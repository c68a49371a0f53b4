// Whole small files: written so a reader on this machine or another never sees half of
// one (a temporary beside it, then a rename over the old one), and read back.
#pragma once

#include <optional>
#include <string>

namespace hsring {

// Writes `text` to `path` atomically. The temporary's name carries the host and pid, so
// writers on several machines sharing the folder never collide. Throws std::runtime_error
// naming the path and the reason.
void write_file_atomically(const std::string& path, const std::string& text);

// The whole file, or nullopt when it does not exist. Throws std::runtime_error for any
// other failure to read it.
std::optional<std::string> read_file_if_exists(const std::string& path);

}  // namespace hsring
