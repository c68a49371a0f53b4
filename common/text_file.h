// Whole small files: written so a reader on this machine or another never sees half of
// one (a temporary beside it, then a rename over the old one), and read back. Writing
// never follows nor truncates a name another user planted (common/exclusive_file.h).
#pragma once

#include <optional>
#include <string>

namespace hsring {

// Writes `text` to `path` atomically and durably (fsync, rename, fsync of the folder). The
// temporary is a new file of a random name beside `path` (create_exclusive_temporary), so
// writers on several machines sharing the folder never collide and a symlink or file that
// another user planted, at the temporary's name or at `path`, is never written through.
// Throws Error (class system) naming the path and the reason.
void write_file_atomically(const std::string& path, const std::string& text);

// The whole file, or nullopt when it does not exist. Throws Error (class system) for any
// other failure to read it.
std::optional<std::string> read_file_if_exists(const std::string& path);

}  // namespace hsring
