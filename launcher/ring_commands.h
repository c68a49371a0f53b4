// Operator commands on ring segments: stop a run, remove or garbage-collect segments.
#pragma once

#include <string>

namespace hsring {

// SIGTERM to the ring's launcher (which drains), only when the process the header names
// is proven to hold the ring's launcher lock; else nothing is signalled and it returns 1.
// Returns the exit code.
int stop_ring(const std::string& name);
// Unlinks a segment; refuses, unless `force`, while any liveness lock on the file is held
// (whatever its header says) and when the file is not an hsring segment (no magic). A
// file of another user is never removed (Error kForeignOwner).
int remove_ring(const std::string& name, bool force);
// Removes every hsring segment in /dev/shm whose processes are all dead. Segments that
// are not hsring rings, or belong to other users, are left alone.
int gc_rings(bool dry_run);

}  // namespace hsring
