#include "data/data_commands.h"

#include <CLI/CLI.hpp>

#include "data/python_handoff.h"
#include "data/text_pack.h"

namespace hsring::data {

struct DataCommands::State {
  CLI::App* pack = nullptr;
  CLI::App* inspect = nullptr;
  CLI::App* prepare = nullptr;
  DataPackArgs pack_args;
  DataInspectArgs inspect_args;
};

bool DataCommands::selected() const {
  return state_ && (*state_->pack || *state_->inspect || *state_->prepare);
}

int DataCommands::run() const {
  if (*state_->pack) return run_data_pack(state_->pack_args);
  if (*state_->prepare)  // every flag is the Python side's (hsring/prepare/cli.py)
    return exec_python_module("hsring data prepare", "hsring.prepare.cli",
                              state_->prepare->remaining());
  return run_data_inspect(state_->inspect_args);
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
  s.inspect->add_option("path", s.inspect_args.path, "Shard folder, or one shard file")
      ->required()
      ->check(CLI::ExistingPath);
  s.inspect
      ->add_option("--doc", s.inspect_args.doc,
                   "Show document N (from 0, across the shards in order): its tokens with the "
                   "trained ones marked (hsring's Python package)")
      ->check(CLI::NonNegativeNumber);
  s.inspect->add_option("--model", s.inspect_args.model,
                        "With --doc: the model folder whose tokenizer decodes the tokens");
  s.inspect->add_flag("--tokens", s.inspect_args.tokens, "With --doc: one line per token");

  // Its flags are declared once, by the Python side, which also answers --help.
  s.prepare = data->add_subcommand(
      "prepare",
      "Chat datasets (JSON Lines, JSON, Parquet) to token shards with a model's own tokenizer "
      "and chat template, trained on the assistant's tokens; --help for its flags "
      "(hsring's Python package, data extra: pip install " +
          python_install_command() + ")");
  s.prepare->prefix_command();
  s.prepare->set_help_flag();
  return commands;
}

}  // namespace hsring::data
