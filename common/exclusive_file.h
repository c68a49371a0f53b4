// Files created in folders that another user may write to (/tmp, a node_exporter textfile
// folder, a shared run folder): every file hsring writes goes through a temporary that only
// this call can have made, so a symlink or a file planted under a name hsring would use is
// never followed, truncated or appended to.
#pragma once

#include <sys/types.h>

#include <string>

namespace hsring {

// An open, new, empty regular file, or the errno that kept it from being made.
struct ExclusiveTemporary {
  int fd = -1;       // O_WRONLY | O_CLOEXEC; the caller closes it
  std::string path;  // `dir`/`prefix` followed by random characters
  int error = 0;     // 0 when fd is open
};

// Creates a file in `dir` named `prefix` + 16 random characters, with
// O_CREAT | O_EXCL | O_NOFOLLOW: a name that exists already (a planted file or symlink)
// is never opened; another random name is tried instead. `mode` is reduced by the umask.
// Never throws; the caller names the failure in its own layer's error.
ExclusiveTemporary create_exclusive_temporary(const std::string& dir, const std::string& prefix,
                                              mode_t mode = 0644);

// A new, empty folder, or the errno that kept it from being made.
struct ExclusiveFolder {
  std::string path;  // `parent`/`prefix` followed by random characters
  int error = 0;     // 0 when the folder was made
};

// Creates a folder in `parent` named `prefix` + random characters (mkdir never follows nor
// reuses a name that exists), mode 0755 less the umask, to be filled and renamed into place.
// Never throws.
ExclusiveFolder create_exclusive_folder(const std::string& parent, const std::string& prefix);

// The name of the folder that holds `path` ("." for a bare file name).
std::string folder_of(const std::string& path);

}  // namespace hsring
