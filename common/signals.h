// Process-wide stop requests (SIGTERM, SIGINT) and dying with the launcher.
#pragma once

#include <atomic>

namespace hsring {

// Installs handlers that turn SIGTERM and SIGINT into stop_requested(); a second
// SIGINT while stopping exits at once (a person pressing Ctrl-C twice).
void install_stop_handlers();
bool stop_requested();
void request_stop();
int stop_signal();  // the signal that asked us to stop, or 0

// For a worker started by a launcher (HSRING_LAUNCHER_PID set): asks the kernel for
// SIGTERM when the launcher dies, then checks the launcher is still our parent, closing
// the race where it died before the request.
void die_with_launcher();
// True when the launcher named by HSRING_LAUNCHER_PID is no longer our parent.
bool launcher_gone();

}  // namespace hsring
