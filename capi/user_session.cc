#include "capi/user_session.h"

#include <fmt/format.h>

#include <cstdlib>

#include "capi/capi_error.h"
#include "common/error.h"
#include "common/log.h"
#include "worker/profile_interval.h"
#include "worker/session_duties.h"
#include "worker/worker_main.h"

namespace hsring::capi {

namespace {

constexpr uint32_t kDefaultLockWaitMs = 2000;

// HSRING_GPU (the launcher's GPU id of this worker), or -1 when unset or not an id.
int gpu_from_env() {
  const char* text = std::getenv("HSRING_GPU");
  if (text == nullptr || *text == '\0') return -1;
  char* end = nullptr;
  const long gpu = std::strtol(text, &end, 10);
  return (*end == '\0' && gpu >= 0 && gpu < (1 << 16)) ? int(gpu) : -1;
}

}  // namespace

std::unique_ptr<WorkerSession> start_user_session(const std::string& ring, Role role,
                                                  uint32_t index, uint32_t lock_wait_ms,
                                                  uint32_t expected_epoch) {
  const double profile_s = profile_interval_from_env();  // Error(kUsage): INVALID_ARGUMENT
  const uint32_t wait_ms = lock_wait_ms ? lock_wait_ms : kDefaultLockWaitMs;
  auto session = start_worker_session(ring, role, index, std::chrono::milliseconds(wait_ms));
  // The profile line goes to the worker's log through log_line, with the prefix set
  // below, as hsring's workers write it. Ticked by the heartbeats of next_job / next /
  // release, so a worker that stops calling them stops logging (and beating).
  attach_session_duties(*session, uint64_t(profile_s * 1e9), log_line);
  // After the start: the epoch is this start's, so a mismatch means another incarnation
  // started in between (or the launcher's idea of it is stale). The session's
  // destructor marks this one exited and lets the lock go.
  const uint32_t epoch = session->identity().epoch;
  if (expected_epoch != 0 && epoch != expected_epoch)
    throw Error(Errc::kRingProcessBusy,
                fmt::format("ring '{}': {} {} started as epoch {}, not the {} HSRING_EPOCH "
                            "names: another incarnation started",
                            ring, to_string(role), index, epoch, expected_epoch));
  // As hsring's GPU workers store theirs: status and metrics label the worker with it.
  const int gpu = gpu_from_env();
  session->entry().gpu.store(gpu, std::memory_order_relaxed);
  set_log_prefix(worker_log_prefix(role, index, gpu, epoch));
  return session;
}

}  // namespace hsring::capi
