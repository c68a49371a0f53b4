// Operator commands on ring segments: stop a run, remove or garbage-collect segments.
#pragma once

#include <string>

namespace hsring {

// SIGTERM to the ring's launcher (which drains). Returns the exit code.
int stop_ring(const std::string& name);
// Unlinks a segment; refuses while any of its processes lives unless `force`.
int remove_ring(const std::string& name, bool force);
// Removes every hsring segment in /dev/shm whose processes are all dead. Segments that
// are not hsring rings, or belong to other users, are left alone.
int gc_rings(bool dry_run);

}  // namespace hsring
