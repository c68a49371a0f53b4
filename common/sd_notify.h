// The systemd notification protocol (sd_notify(3)): READY=1, WATCHDOG=1 and STATUS= sent
// as datagrams to $NOTIFY_SOCKET. A few lines of socket code instead of libsystemd, so the
// worker binaries keep running on GPU machines where nothing can be installed. Without
// $NOTIFY_SOCKET (not under systemd) every call is a no-op.
#pragma once

#include <cstdint>
#include <string>

namespace hsring {

void notify_systemd(const std::string& message);
void notify_ready();
// Sends WATCHDOG=1 at most twice per $WATCHDOG_USEC period (cheap to call often).
void notify_watchdog();

}  // namespace hsring
