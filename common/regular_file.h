// Opening input files that must be regular files. A FIFO, a device, a socket or a folder
// given where hsring expects a file (a checkpoint, model.safetensors, a shard, a config) must
// not hang the process in open() or read() nor be read as data: every input is opened here,
// non-blocking, and judged by fstat on the descriptor it got.
#pragma once

#include <fcntl.h>
#include <sys/types.h>

#include <string>

#include "common/error.h"

namespace hsring {

// An open regular file, or why there is none.
struct RegularFileOpen {
  int fd = -1;          // >= 0 when open; blocking again; O_CLOEXEC; the caller closes it
  int error = 0;        // the errno of open() or fstat(), or 0 (also for a non-regular file)
  std::string problem;  // "" when open; else "a FIFO (named pipe), not a regular file", ...
};

// Opens `path` with `flags` (O_RDONLY by default; O_WRONLY | O_APPEND | O_CREAT for a log)
// only if it is a regular file. open() itself is O_NONBLOCK | O_NOCTTY, so a FIFO without a
// writer (or, opened for writing, without a reader) cannot block it; the file type is then
// read from the descriptor, so a name swapped after a check cannot slip through; and
// O_NONBLOCK is cleared before the descriptor is returned. Never throws.
RegularFileOpen try_open_regular_file(const std::string& path, int flags = O_RDONLY,
                                      mode_t mode = 0644);

// As try_open_regular_file, but throws Error(`code`, path, the problem and what to do)
// where it has no descriptor to return.
int open_regular_file(const std::string& path, Errc code, int flags = O_RDONLY, mode_t mode = 0644);

// The whole of the regular file `path`. Throws Error(`code`) naming the path when it cannot
// be opened as one, when it is larger than `max_bytes` (checked before anything is
// allocated), or when reading fails.
std::string read_regular_file(const std::string& path, Errc code, size_t max_bytes);

// "a FIFO (named pipe)", "a folder", "a character device", ... for an st_mode.
std::string file_type_name(mode_t mode);

}  // namespace hsring
