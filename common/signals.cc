#include "common/signals.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdlib>

namespace hsring {

namespace {

std::atomic<int> g_stop_signal{0};
pid_t g_launcher_pid = 0;

void on_stop_signal(int signal) {
  // Relaxed is enough: the flag is polled, and it orders nothing else.
  if (g_stop_signal.exchange(signal, std::memory_order_relaxed) == SIGINT && signal == SIGINT)
    _exit(130);
}

}  // namespace

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

bool stop_requested() { return g_stop_signal.load(std::memory_order_relaxed) != 0; }
void request_stop() { g_stop_signal.store(SIGTERM, std::memory_order_relaxed); }
int stop_signal() { return g_stop_signal.load(std::memory_order_relaxed); }

void die_with_launcher() {
  const char* value = std::getenv("HSRING_LAUNCHER_PID");
  if (value == nullptr) return;
  g_launcher_pid = pid_t(std::atol(value));
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (launcher_gone()) request_stop();
}

bool launcher_gone() { return g_launcher_pid != 0 && getppid() != g_launcher_pid; }

}  // namespace hsring
