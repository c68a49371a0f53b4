// `hsring data pack`, `hsring data inspect` and `hsring data prepare`: the operator's side of
// token shards. main() registers them with add_data_commands() and, after parsing, runs
// the one chosen. `prepare` and `inspect --doc` hand over to the Python package
// (data/python_handoff.h): tokenizers and chat templates are Python's.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
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

struct DataInspectArgs {
  std::string path;             // a shard folder or one shard file
  std::optional<uint64_t> doc;  // show this document (hsring.prepare.show) instead
  std::string model;            // with doc: the folder whose tokenizer decodes it
  bool tokens = false;          // with doc: one line per token
};

// Each prints what it did on stdout and any error on stderr, naming file and byte.
// Returns 0 on success, 1 when an input or a shard is bad. run_data_inspect with a doc
// replaces the process with Python's (exit 2 on a bad document number or corpus).
int run_data_pack(const DataPackArgs& args);
int run_data_inspect(const DataInspectArgs& args);

class DataCommands {
 public:
  bool selected() const;  // after parsing: was `data pack`, `inspect` or `prepare` given?
  int run() const;        // REQUIRES: selected()

 private:
  friend DataCommands add_data_commands(CLI::App& app);
  struct State;
  std::shared_ptr<State> state_;  // CLI11 binds to its fields: their address must not move
};

// Adds `data` with its subcommands `pack`, `inspect` and `prepare` to `app`.
DataCommands add_data_commands(CLI::App& app);

}  // namespace hsring::data
