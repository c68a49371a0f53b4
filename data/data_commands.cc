#include "data/data_commands.h"

#include <CLI/CLI.hpp>

#include "data/text_pack.h"

namespace hsring::data {

struct DataCommands::State {
  CLI::App* pack = nullptr;
  CLI::App* inspect = nullptr;
  DataPackArgs pack_args;
  std::string inspect_path;
};

bool DataCommands::selected() const { return state_ && (*state_->pack || *state_->inspect); }

int DataCommands::run() const {
  if (*state_->pack) return run_data_pack(state_->pack_args);
  return run_data_inspect(state_->inspect_path);
}

DataCommands add_data_commands(CLI::App& app) {
  DataCommands commands;
  commands.state_ = std::make_shared<DataCommands::State>();
  DataCommands::State& s = *commands.state_;
  CLI::App* data = app.add_subcommand("data", "Pack text into token shards, check shards");
  data->require_subcommand(1);

  s.pack = data->add_subcommand(
      "pack", "Pack text files into byte-level token shards (vocabulary 256, uint8 tokens)");
  s.pack->add_option("inputs", s.pack_args.inputs, "Text files, or folders of them")
      ->required()
      ->check(CLI::ExistingPath);
  s.pack->add_option("-o,--out", s.pack_args.out_dir, "Folder for the shards (new or empty)")
      ->required();
  s.pack_args.shard_tokens = kDefaultShardTokens;
  s.pack->add_option("--shard-tokens", s.pack_args.shard_tokens, "Most tokens in one shard")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  s.pack->add_flag("--split-blank-lines", s.pack_args.split_blank_lines,
                   "One document per paragraph (blank-line separated), not one per file");

  s.inspect = data->add_subcommand(
      "inspect", "Check every shard of a folder (header, offsets, checksums) and summarise");
  s.inspect->add_option("path", s.inspect_path, "Shard folder, or one shard file")
      ->required()
      ->check(CLI::ExistingPath);
  return commands;
}

}  // namespace hsring::data
