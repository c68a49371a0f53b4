#include "worker/node_topology.h"

#include <fmt/format.h>

#include <charconv>
#include <stdexcept>

#include "common/error.h"

namespace hsring {

namespace {

// The variable's value as a count, or nullopt when unset. Throws for anything but digits.
std::optional<uint32_t> env_number(const EnvLookup& env, const char* name) {
  const char* text = env(name);
  if (text == nullptr) return std::nullopt;
  const std::string value = text;
  uint32_t number = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), number);
  if (value.empty() || error != std::errc() || end != value.data() + value.size())
    throw Error(Errc::kUsage, std::string(name) + "='" + value +
                                  "' is not a count: fix the environment, or give --nnodes and "
                                  "--node-rank");
  return number;
}

// The environment's topology: torchrun's, else Slurm's, else none.
std::optional<NodeTopology> from_environment(const EnvLookup& env) {
  if (const auto nodes = env_number(env, "GROUP_WORLD_SIZE")) {
    const auto rank = env_number(env, "GROUP_RANK");
    if (!rank) throw Error(Errc::kUsage, "GROUP_WORLD_SIZE is set but GROUP_RANK is not");
    if (const auto local = env_number(env, "LOCAL_WORLD_SIZE"); local && *local != 1)
      throw Error(Errc::kUsage,
                  fmt::format("torchrun started {} hsring launchers on this machine "
                              "(LOCAL_WORLD_SIZE): run one per machine (torchrun "
                              "--nproc-per-node 1); hsring starts a worker per GPU itself",
                              *local));
    return NodeTopology{*nodes, *rank, "torchrun"};
  }
  if (const auto nodes = env_number(env, "SLURM_NNODES")) {
    const auto rank = env_number(env, "SLURM_NODEID");
    if (!rank) throw Error(Errc::kUsage, "SLURM_NNODES is set but SLURM_NODEID is not");
    if (const auto tasks = env_number(env, "SLURM_NTASKS"); tasks && *tasks != *nodes)
      throw Error(Errc::kUsage,
                  fmt::format("Slurm runs {} tasks on {} nodes (SLURM_NTASKS): run one hsring "
                              "launcher per node (srun --ntasks-per-node 1)",
                              *tasks, *nodes));
    return NodeTopology{*nodes, *rank, "Slurm"};
  }
  return std::nullopt;
}

}  // namespace

NodeTopology resolve_node_topology(std::optional<uint32_t> nnodes_flag,
                                   std::optional<uint32_t> node_rank_flag, const EnvLookup& env) {
  NodeTopology t;
  if (nnodes_flag && node_rank_flag) {
    t = NodeTopology{*nnodes_flag, *node_rank_flag, "flags"};
  } else if (std::optional<NodeTopology> found = from_environment(env)) {
    t = *found;
    if (nnodes_flag) t.nnodes = *nnodes_flag;
    if (node_rank_flag) t.node_rank = *node_rank_flag;
  } else if (nnodes_flag) {
    if (*nnodes_flag > 1)
      throw Error(Errc::kUsage,
                  fmt::format("--nnodes {} needs --node-rank (this machine's rank, 0 to {})",
                              *nnodes_flag, *nnodes_flag - 1));
    t = NodeTopology{1, 0, "flags"};
  } else if (node_rank_flag) {
    throw Error(Errc::kUsage, "--node-rank needs --nnodes (the number of machines)");
  } else {
    return t;  // one machine
  }
  check_node_topology(t);
  return t;
}

void check_node_topology(const NodeTopology& t) {
  if (t.nnodes < 1 || t.nnodes > kMaxNodes)
    throw Error(Errc::kUsage, fmt::format("the run has {} nodes ({}): give 1 to {}", t.nnodes,
                                          t.source, kMaxNodes));
  if (t.node_rank >= t.nnodes)
    throw Error(Errc::kUsage,
                fmt::format("node rank {} ({}) is not below the {} nodes: ranks go from 0 to {}",
                            t.node_rank, t.source, t.nnodes, t.nnodes - 1));
}

}  // namespace hsring
