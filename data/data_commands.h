// `hsring data pack` and `hsring data inspect`: the operator's side of token shards.
// main() registers them with add_data_commands() and, after parsing, runs the one chosen.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace hsring::data {

struct DataPackArgs {
  std::vector<std::string> inputs;  // text files, or folders (their files, sorted, recursively)
  std::string out_dir;
  uint64_t shard_tokens = 0;  // 0: the default
  bool split_blank_lines = false;
};

// Each prints what it did on stdout and any error on stderr, naming file and byte.
// Returns 0 on success, 1 when an input or a shard is bad.
int run_data_pack(const DataPackArgs& args);
int run_data_inspect(const std::string& path);  // a shard folder or one shard file

class DataCommands {
 public:
  bool selected() const;  // after parsing: was `data pack` or `data inspect` given?
  int run() const;        // REQUIRES: selected()

 private:
  friend DataCommands add_data_commands(CLI::App& app);
  struct State;
  std::shared_ptr<State> state_;  // CLI11 binds to its fields: their address must not move
};

// Adds `data` with its subcommands `pack` and `inspect` to `app`.
DataCommands add_data_commands(CLI::App& app);

}  // namespace hsring::data
