// Death detection that PID reuse and PID namespaces cannot fool (ring-protocol.md invariant 4).
// Each live process of a ring holds an open-file-description (OFD) write lock on one byte
// of the segment's file, far past its end: byte kLivenessLockBase + process index. The
// kernel drops the lock when the process dies, however it dies, before its parent can
// reap it. Anyone can test the lock without taking it.
#pragma once

#include <cstdint>

namespace hsring {

inline constexpr uint64_t kLivenessLockBase = 1ull << 40;
// The launcher's lock index: after every worker index.
inline constexpr uint32_t kLauncherLockIndex = 1u << 16;

// Takes the lock of `index` on `fd` without waiting; false when another open file
// description holds it. Held until `fd` (every duplicate of it) is closed.
bool try_hold_liveness_lock(int fd, uint32_t index);
// Gives the lock back early (a clean exit that keeps the segment open).
void release_liveness_lock(int fd, uint32_t index);
// True when an open file description other than `fd`'s holds the lock of `index`.
bool liveness_lock_held_elsewhere(int fd, uint32_t index);
// The pid that holds the lock of `index`, or 0 when none. OFD locks report -1 as pid on
// Linux; the caller then uses the pid recorded in the process table.
int liveness_lock_holder(int fd, uint32_t index);
// True when any open file description other than `fd`'s holds a liveness lock on the
// file: any process index or the launcher's. Reads nothing of the segment's contents, so
// it answers for a segment whose header is corrupt or that is not a ring at all.
bool any_liveness_lock_held_elsewhere(int fd);
// True when process `pid` (as this process's /proc sees it) has an open file description
// of `fd`'s file that holds the lock of `index`: proof, unlike a pid written in the
// segment, that `pid` is that process. Read from /proc/<pid>/fdinfo (the kernel lists an
// open file's OFD locks there); false when that cannot be read.
bool process_holds_liveness_lock(int pid, int fd, uint32_t index);

}  // namespace hsring
