#include "launcher/service_commands.h"

#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <vector>

#include "common/error.h"
#include "common/syscheck.h"
#include "launcher/data_preflight.h"
#include "launcher/preflight.h"
#include "launcher/ring_commands.h"
#include "launcher/training_plan.h"
#include "launcher/user_command.h"
#include "launcher/worker_command.h"
#include "shm/ring.h"

namespace hsring {

namespace {

[[noreturn]] void exec_argv(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execv(args[0], args.data());
  throw sys_error(Errc::kSystem, errno, fmt::format("cannot run {}", argv[0]));
}

// A user command as a unit's worker: the environment `hsring run` gives it, with the
// epoch its start will open read from the ring (the unit starts after hsring-ring and
// systemd runs one instance of a unit at a time, so no other incarnation opens it first).
[[noreturn]] void exec_user_worker(const RunOptions& options, Role role, uint32_t index, int gpu,
                                   const std::string& bin_dir) {
  uint32_t epoch = 0;
  {
    auto ring = Ring::attach(options.ring, Ring::Access::kReadOnly);
    const uint32_t row = role == Role::kTarget ? index : ring->shape().num_targets + index;
    if (row >= ring->process_count())
      throw Error(Errc::kUsage,
                  fmt::format("ring '{}' has no {} {}: its shape differs from the config",
                              options.ring, to_string(role), index));
    // Relaxed: a plain reading; the worker's own start checks it (HS_ERR_BUSY otherwise).
    epoch = ring->process(row).epoch.load(std::memory_order_relaxed);
  }
  const UserWorkerCommand command =
      user_worker_command(options, role, index, gpu, epoch + 1, bin_dir);
  for (const auto& [name, value] : command.env) ::setenv(name.c_str(), value.c_str(), 1);
  exec_argv(command.argv);
}

// Shapes are compatible when everything but the per-run batch limit matches.
bool same_shape(RingShape a, RingShape b) {
  a.batch_limit = b.batch_limit = 0;
  return std::memcmp(&a, &b, sizeof a) == 0;
}

}  // namespace

int create_ring_only(const RunOptions& options) {
  const WorkerSpec targets = parse_worker_spec(options.targets, "--targets");
  const WorkerSpec drafters = parse_worker_spec(options.drafters, "--drafters");
  RingShape shape = ring_shape_of(options, targets, drafters);
  shape.batch_limit = options.batches;  // a service runs until stopped unless told
  if (std::string why = validate_shape(shape); !why.empty())
    throw Error(Errc::kUsage, "cannot create this ring: " + why);
  try {
    auto ring = Ring::attach(options.ring);
    if (!same_shape(ring->shape(), shape)) {
      throw Error(Errc::kUsage, "ring '" + options.ring + "' exists with another shape; " +
                                    "stop its workers and `hsring ring remove " + options.ring +
                                    "` to recreate it with the configured one");
    }
    std::cerr << "reusing existing ring '" << options.ring << "' (same shape)\n";
    return 0;
  } catch (const Error& e) {
    if (e.code() != Errc::kRingNotFound) throw;
  }
  // The same checks as `hsring run`, so a unit fails at once with the reason, not as a
  // crash loop of its workers.
  preflight_run(options, targets, drafters, shape);
  check_target_data(options, shape);
  auto ring = Ring::create(options.ring, shape);
  for (uint32_t i = 0; i < ring->process_count(); ++i) {
    const bool target = i < targets.count;
    const WorkerSpec& spec = target ? targets : drafters;
    const uint32_t index = target ? i : i - targets.count;
    ring->process(i).gpu.store(spec.cpu ? -1 : spec.gpus[index], std::memory_order_relaxed);
  }
  std::cerr << "created ring '" << options.ring << "': " << shape.slot_count << " slots, "
            << (ring->layout().total_size >> 20) << " MiB\n";
  return 0;
}

int remove_ring_only(const RunOptions& options) {
  try {
    return remove_ring(options.ring, /*force=*/true);
  } catch (const Error& e) {
    if (e.code() == Errc::kRingNotFound) return 0;  // already gone: stopping is done
    throw;
  }
}

int exec_worker(const RunOptions& options, const std::string& role_instance,
                const std::string& bin_dir) {
  const size_t colon = role_instance.find(':');
  const std::string role_name = role_instance.substr(0, colon);
  if (colon == std::string::npos || (role_name != "target" && role_name != "drafter"))
    throw Error(Errc::kUsage, "--exec-worker '" + role_instance + "': use target:I or drafter:I");
  const bool target = role_name == "target";
  const WorkerSpec spec = parse_worker_spec(target ? options.targets : options.drafters,
                                            target ? "--targets" : "--drafters");
  uint32_t instance = 0;
  try {
    instance = uint32_t(std::stoul(role_instance.substr(colon + 1)));
  } catch (const std::exception&) {
    throw Error(Errc::kUsage, "--exec-worker '" + role_instance + "': instance is not a number");
  }
  int gpu = -1;
  uint32_t index = instance;
  if (!spec.cpu) {
    uint32_t matches = 0;
    for (uint32_t i = 0; i < spec.count; ++i) {
      if (spec.gpus[i] == int(instance)) {
        index = i;
        ++matches;
      }
    }
    if (matches != 1)
      throw Error(Errc::kUsage,
                  fmt::format("--exec-worker {}: GPU {} appears {} times in the configured {}s",
                              role_instance, instance, matches, role_name));
    gpu = int(instance);
  } else if (instance >= spec.count) {
    throw Error(Errc::kUsage, fmt::format("--exec-worker {}: the config has {} {}s", role_instance,
                                          spec.count, role_name));
  }
  RunOptions resolved = options;
  // Before the per-machine default run folder could hide a missing shared one.
  check_multi_node(resolved, parse_worker_spec(resolved.drafters, "--drafters"));
  resolve_run_dir(resolved, /*service=*/true);
  const Role role = target ? Role::kTarget : Role::kDrafter;
  if (!user_command_of(resolved, role).empty())
    exec_user_worker(resolved, role, index, gpu, bin_dir);
  exec_argv(worker_argv(resolved, role, index, gpu, bin_dir));
}

}  // namespace hsring
