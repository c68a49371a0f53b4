// Where the workers' stdout and stderr go, made safe for a launcher that runs as root beside
// other users: the folder is the launcher user's own, and a log file is never a name another
// user planted (a symlink to a file of root's, a file of theirs that would receive the logs).
#pragma once

#include <string>

namespace hsring {

// Creates `dir` (and its parents) if missing and checks that it is a folder owned by this
// process's user. Throws Error(kUsage) naming the folder and its owner otherwise: another
// user could read the logs there or plant links in it.
void prepare_log_folder(const std::string& dir);

// A new folder `parent`/hsring-`ring`-XXXXXX of a random name, mode 0700 (mkdtemp), for the
// logs of user commands when no --log-dir is given: a predictable name could have been
// created in advance by another user. Throws Error(kSystem) when it cannot be made.
std::string create_private_log_folder(const std::string& parent, const std::string& ring);

// Opens log `path` to append (O_APPEND | O_NOFOLLOW | O_CLOEXEC), creating it 0644 if
// missing, and checks that it is a regular file of this user with one link. Returns the
// descriptor; throws Error(kUsage) naming the file when it is a symlink or another user's
// file, Error(kSystem) for other failures.
int open_worker_log(const std::string& path);

}  // namespace hsring
