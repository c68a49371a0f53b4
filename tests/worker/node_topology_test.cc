// Which machine a launcher is: flags first, then torchrun's or Slurm's environment. Every
// refusal names the flag or variable at fault.
#include "worker/node_topology.h"
#include "common/error.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "tests/common/thrown_error.h"

namespace hsring {
namespace {

using Env = std::map<std::string, std::string>;

EnvLookup lookup(const Env& env) {
  return [&env](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
}

NodeTopology resolve(std::optional<uint32_t> nnodes, std::optional<uint32_t> rank, const Env& env) {
  return resolve_node_topology(nnodes, rank, lookup(env));
}

using hsring::testing::thrown_message;

TEST(NodeTopologyTest, ALoneMachineWithoutFlagsOrEnvironment) {
  const NodeTopology t = resolve(std::nullopt, std::nullopt, {});
  EXPECT_EQ(t.nnodes, 1u);
  EXPECT_EQ(t.node_rank, 0u);
  EXPECT_EQ(t.source, "");
}

TEST(NodeTopologyTest, FlagsWinOverTheEnvironment) {
  const Env torchrun = {{"GROUP_WORLD_SIZE", "4"}, {"GROUP_RANK", "3"}};
  const NodeTopology t = resolve(2, 1, torchrun);
  EXPECT_EQ(t.nnodes, 2u);
  EXPECT_EQ(t.node_rank, 1u);
  EXPECT_EQ(t.source, "flags");
  // One flag given: it overrides its half of the environment's answer.
  const NodeTopology half = resolve(std::nullopt, 0, torchrun);
  EXPECT_EQ(half.nnodes, 4u);
  EXPECT_EQ(half.node_rank, 0u);
}

TEST(NodeTopologyTest, TorchrunAndSlurmVariablesAreUnderstood) {
  const NodeTopology t =
      resolve(std::nullopt, std::nullopt,
              {{"GROUP_WORLD_SIZE", "3"}, {"GROUP_RANK", "2"}, {"LOCAL_WORLD_SIZE", "1"}});
  EXPECT_EQ(t.nnodes, 3u);
  EXPECT_EQ(t.node_rank, 2u);
  EXPECT_EQ(t.source, "torchrun");
  const NodeTopology s =
      resolve(std::nullopt, std::nullopt,
              {{"SLURM_NNODES", "8"}, {"SLURM_NODEID", "5"}, {"SLURM_NTASKS", "8"}});
  EXPECT_EQ(s.nnodes, 8u);
  EXPECT_EQ(s.node_rank, 5u);
  EXPECT_EQ(s.source, "Slurm");
  // torchrun's word wins when both are set (torchrun inside a Slurm allocation).
  const NodeTopology both = resolve(std::nullopt, std::nullopt,
                                    {{"GROUP_WORLD_SIZE", "2"},
                                     {"GROUP_RANK", "1"},
                                     {"SLURM_NNODES", "8"},
                                     {"SLURM_NODEID", "5"}});
  EXPECT_EQ(both.source, "torchrun");
  EXPECT_EQ(both.nnodes, 2u);
}

TEST(NodeTopologyTest, RefusalsNameTheCulprit) {
  EXPECT_NE(thrown_message([] { resolve(2, std::nullopt, {}); }).find("--node-rank"),
            std::string::npos);
  EXPECT_NE(thrown_message([] { resolve(std::nullopt, 1, {}); }).find("--nnodes"),
            std::string::npos);
  EXPECT_NE(thrown_message([] { resolve(2, 2, {}); }).find("node rank 2"), std::string::npos);
  EXPECT_NE(thrown_message([] { resolve(0, 0, {}); }).find("1 to"), std::string::npos);
  EXPECT_NE(thrown_message([] {
              resolve(std::nullopt, std::nullopt, {{"GROUP_WORLD_SIZE", "2"}});
            }).find("GROUP_RANK"),
            std::string::npos);
  EXPECT_NE(thrown_message([] {
              resolve(std::nullopt, std::nullopt,
                      {{"GROUP_WORLD_SIZE", "2"}, {"GROUP_RANK", "0"}, {"LOCAL_WORLD_SIZE", "8"}});
            }).find("--nproc-per-node 1"),
            std::string::npos);
  EXPECT_NE(thrown_message([] {
              resolve(std::nullopt, std::nullopt,
                      {{"SLURM_NNODES", "2"}, {"SLURM_NODEID", "0"}, {"SLURM_NTASKS", "16"}});
            }).find("--ntasks-per-node 1"),
            std::string::npos);
  EXPECT_NE(thrown_message([] {
              resolve(std::nullopt, std::nullopt, {{"SLURM_NNODES", "2"}, {"SLURM_NODEID", "2"}});
            }).find("Slurm"),
            std::string::npos);
}

// Property: any value that is not a plain count is refused with the variable named; a
// plain count in range is taken as it is.
TEST(NodeTopologyTest, EnvironmentValuesAreParsedStrictly) {
  std::mt19937_64 rng(7);
  const std::string alphabet = "0123456789 -+x.e";
  for (int i = 0; i < 2000; ++i) {
    std::string value;
    const size_t length = rng() % 6;
    for (size_t c = 0; c < length; ++c) value += alphabet[rng() % alphabet.size()];
    const Env env = {{"SLURM_NNODES", value}, {"SLURM_NODEID", "0"}};
    const bool digits =
        !value.empty() && value.find_first_not_of("0123456789") == std::string::npos;
    if (!digits) {
      EXPECT_NE(
          thrown_message([&] { resolve(std::nullopt, std::nullopt, env); }).find("SLURM_NNODES"),
          std::string::npos)
          << "'" << value << "'";
      continue;
    }
    const unsigned long long n = std::stoull(value);
    if (n >= 1 && n <= kMaxNodes) {
      EXPECT_EQ(resolve(std::nullopt, std::nullopt, env).nnodes, n) << value;
    } else {
      EXPECT_THROW(resolve(std::nullopt, std::nullopt, env), Error) << value;
    }
  }
}

}  // namespace
}  // namespace hsring
