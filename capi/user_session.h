// The start of a C API worker, the same for producers and consumers: its WorkerSession
// (liveness lock, new epoch, recovery of the previous one), the duties hsring's own
// workers hang on it (systemd's READY=1 and watchdog; the profile log when the launcher
// asks for one through HSRING_PROFILE_INTERVAL, as it passes --profile-interval to its
// own workers), the check of the epoch the launcher expects, its GPU id (HSRING_GPU) in
// the process table, and the log prefix.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "shm/worker_session.h"

namespace hsring::capi {

// Throws Error: kRing... (attach, busy index), kUsage (HS_ERR_INVALID_ARGUMENT: a bad
// HSRING_PROFILE_INTERVAL, before anything starts), kRingProcessBusy (HS_ERR_BUSY: another
// epoch than `expected_epoch`, when nonzero).
std::unique_ptr<WorkerSession> start_user_session(const std::string& ring, Role role,
                                                  uint32_t index, uint32_t lock_wait_ms,
                                                  uint32_t expected_epoch);

}  // namespace hsring::capi
