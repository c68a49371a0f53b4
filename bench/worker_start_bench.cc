// worker_start_bench: how long a restarted worker costs before it works again. In one run it
// times, many times over, exec to ready (the worker's process entry says running: flags
// parsed, ring attached, epoch taken, its pipeline set up) for each worker program, and
// beside it exec to exit of /bin/true: the floor of any program start on this machine.
//
// With --gpu N the GPU builds run on that GPU (their figure then includes the CUDA context,
// pinning the ring and the pipeline's buffers). Without it every program runs in CPU mode,
// and the GPU builds show what loading the CUDA libraries alone costs a CPU worker.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "shm/recovery.h"
#include "shm/ring.h"

namespace {

using namespace hsring;
using Clock = std::chrono::steady_clock;

constexpr std::chrono::seconds kReadyLimit{60};

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

pid_t spawn(std::vector<std::string> argv) {
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    // Workers log their recoveries: not the benchmark's output.
    const int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) ::dup2(null, STDERR_FILENO);
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

// Milliseconds from fork to the exit of `argv` (for the baseline: a program that does nothing).
double time_to_exit(const std::vector<std::string>& argv) {
  const auto start = Clock::now();
  const pid_t pid = spawn(argv);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) throw std::runtime_error(argv[0] + " failed");
  return ms_since(start);
}

// Milliseconds from fork to the worker's entry in `ring` saying it runs; then kills it and
// recovers what it held, as the launcher would, so the next start finds the ring as it was.
double time_to_ready(Ring& ring, uint32_t process_index, const std::vector<std::string>& argv) {
  const auto start = Clock::now();
  const pid_t pid = spawn(argv);
  const ProcessEntry& entry = ring.process(process_index);
  while (!(entry.pid.load(std::memory_order_acquire) == pid &&
           entry.state.load(std::memory_order_acquire) == uint32_t(ProcessState::kRunning))) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid)
      throw std::runtime_error(argv[0] + " exited before it was ready (status " +
                               std::to_string(status) + ")");
    if (Clock::now() - start > kReadyLimit) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      throw std::runtime_error(argv[0] + " was not ready within 60 s");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  const double ms = ms_since(start);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  recover_dead_owners(ring);
  return ms;
}

struct Figures {
  double median = 0, p90 = 0, min = 0;
};

Figures summarise(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms[std::min(ms.size() - 1, ms.size() * 9 / 10)], ms.front()};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"worker_start_bench: exec to ready of each worker program, against /bin/true"};
  uint32_t reps = 30;
  int gpu = -1;
  bool quick = false;
  std::string bin_dir;
  app.add_option("--reps", reps, "Starts of each program")->check(CLI::Range(1u, 100000u));
  app.add_option("--gpu", gpu, "Run the GPU builds on this GPU (default: CPU mode)");
  app.add_option("--bin-dir", bin_dir, "Where the worker programs are (default: beside this one)");
  app.add_flag("--quick", quick, "3 starts each (a smoke test)");
  CLI11_PARSE(app, argc, argv);
  if (quick) reps = 3;
  if (bin_dir.empty())
    bin_dir = std::filesystem::read_symlink("/proc/self/exe").parent_path().string();

  const std::string name = "hsring-start-bench-" + std::to_string(::getpid());
  RingShape shape;
  shape.slot_count = 4;
  shape.max_tokens = 64;
  shape.hidden_size = 64;
  for (uint32_t k = 0; k < shape.num_layers; ++k) shape.layer_ids[k] = int32_t(k);
  int code = 0;
  try {
    auto ring = Ring::create(name, shape);
    std::vector<double> floor;
    for (uint32_t r = 0; r < reps; ++r) floor.push_back(time_to_exit({"/bin/true"}));
    const Figures base = summarise(floor);
    std::printf("%-20s %9s %9s %9s %9s\n", "program", "median ms", "p90 ms", "min ms",
                "x /bin/true");
    std::printf("%-20s %9.2f %9.2f %9.2f %9.2f\n", "/bin/true (floor)", base.median, base.p90,
                base.min, 1.0);
    for (const char* program :
         {"hsring-target", "hsring-drafter", "hsring-target-gpu", "hsring-drafter-gpu"}) {
      const std::string path = bin_dir + "/" + program;
      if (::access(path.c_str(), X_OK) != 0) {
        std::printf("%-20s (not built: a build without CUDA)\n", program);
        continue;
      }
      const bool target = std::string(program).starts_with("hsring-target");
      const bool gpu_build = std::string(program).ends_with("-gpu");
      std::vector<std::string> args = {path, "--ring", name, "--index", "0"};
      if (gpu_build && gpu >= 0) args.insert(args.end(), {"--gpu", std::to_string(gpu)});
      if (!target) args.insert(args.end(), {"--step-ms", "1"});
      std::vector<double> ms;
      for (uint32_t r = 0; r < reps; ++r)
        ms.push_back(time_to_ready(*ring, target ? 0 : shape.num_targets, args));
      const Figures f = summarise(ms);
      std::printf("%-20s %9.2f %9.2f %9.2f %9.2f%s\n", program, f.median, f.p90, f.min,
                  f.median / base.median, gpu_build && gpu >= 0 ? "  (on the GPU)" : "");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker_start_bench: %s\n", e.what());
    code = 1;
  }
  Ring::remove(name);
  return code;
}
