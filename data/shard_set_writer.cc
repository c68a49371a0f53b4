#include "data/shard_set_writer.h"

#include <cstdio>
#include <filesystem>

#include "common/error.h"
#include "data/corpus.h"

namespace hsring::data {

namespace fs = std::filesystem;

namespace {

std::string shard_name(size_t index) {
  char name[32];
  std::snprintf(name, sizeof name, "shard-%05zu%s", index, kShardExtension);
  return name;
}

}  // namespace

uint32_t token_bytes_for(uint32_t vocab_size) {
  return vocab_size <= 256 ? 1 : vocab_size <= 65536 ? 2 : 4;
}

ShardSetWriter::ShardSetWriter(std::string dir, uint32_t token_bytes, uint32_t vocab_size,
                               uint64_t shard_tokens)
    : dir_(std::move(dir)),
      token_bytes_(token_bytes),
      vocab_size_(vocab_size),
      shard_tokens_(shard_tokens) {
  if (shard_tokens == 0) throw Error(Errc::kDataBadOptions, "tokens per shard must be > 0");
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw Error(Errc::kDataIo, dir_, 0, "cannot create the folder: " + ec.message());
  if (!Corpus::list_shards(dir_).empty())
    throw Error(Errc::kDataBadOptions,
                dir_ + " already holds shards; write into an empty or new folder");
}

ShardWriter& ShardSetWriter::writer_for(uint64_t tokens) {
  if (writer_ && writer_->token_count() > 0 && writer_->token_count() + tokens > shard_tokens_) {
    writer_->finish();
    writer_.reset();
  }
  if (!writer_) {
    const std::string path = (fs::path(dir_) / shard_name(summary_.shard_paths.size())).string();
    writer_ = std::make_unique<ShardWriter>(path, token_bytes_, vocab_size_);
    summary_.shard_paths.push_back(path);
  }
  return *writer_;
}

void ShardSetWriter::add_document(std::span<const uint32_t> tokens,
                                  std::span<const uint8_t> counted) {
  writer_for(tokens.size()).add_document(tokens, counted);
  ++summary_.documents;
  summary_.tokens += tokens.size();
  if (counted.empty()) {
    summary_.counted += tokens.size();
  } else {
    for (uint8_t c : counted) summary_.counted += c != 0;
  }
}

void ShardSetWriter::add_text_document(std::string_view text) {
  writer_for(text.size()).add_text_document(text);
  ++summary_.documents;
  summary_.tokens += text.size();
  summary_.counted += text.size();
}

ShardSetSummary ShardSetWriter::finish() {
  if (writer_) {
    writer_->finish();
    writer_.reset();
  }
  return summary_;
}

}  // namespace hsring::data
