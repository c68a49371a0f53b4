// Which machine of a multi-machine run this is: `hsring run --nnodes N --node-rank R`, or,
// given neither, what torchrun or Slurm tell the process they started. One launcher runs
// per machine; its drafters and those of every other machine train one model together.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace hsring {

inline constexpr uint32_t kMaxNodes = 4096;

struct NodeTopology {
  uint32_t nnodes = 1;
  uint32_t node_rank = 0;
  std::string source;  // "flags", "torchrun", "Slurm", or "" for a lone machine
};

// A variable's value, or nullptr when unset (std::getenv in the launcher).
using EnvLookup = std::function<const char*(const char*)>;

// The flags win; a flag left out (nullopt) comes from the environment:
//   torchrun (torch.distributed.run, one launcher per node: --nproc-per-node 1):
//     GROUP_WORLD_SIZE nodes, GROUP_RANK this one's; LOCAL_WORLD_SIZE must be 1
//   Slurm (srun, one task per node): SLURM_NNODES, SLURM_NODEID; SLURM_NTASKS = SLURM_NNODES
// Throws Error(kUsage) naming the flag or variable and what to give instead.
NodeTopology resolve_node_topology(std::optional<uint32_t> nnodes_flag,
                                   std::optional<uint32_t> node_rank_flag, const EnvLookup& env);

// Throws Error(kUsage) unless 1 <= nnodes <= kMaxNodes and node_rank < nnodes
// (`source` names where they came from: "flags", "torchrun", ...). For the launcher's
// resolved topology and the workers' own flags alike.
void check_node_topology(const NodeTopology& topology);

}  // namespace hsring
