#include "data/shard_set_writer.h"

#include <fmt/format.h>

#include <filesystem>

#include "common/error.h"
#include "data/corpus.h"

namespace hsring::data {

namespace fs = std::filesystem;

namespace {

std::string shard_name(size_t index) {
  return fmt::format("shard-{:05}{}", index, kShardExtension);
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
  if (shard_tokens == 0) throw Error(Errc::kData, "tokens per shard must be > 0");
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw Error(Errc::kData, dir_, 0, "cannot create the folder: " + ec.message());
  if (!Corpus::list_shards(dir_).empty())
    throw Error(Errc::kData, dir_ + " already holds shards; write into an empty or new folder");
}

ShardSetWriter::ShardSetWriter(std::string dir, uint32_t token_bytes, uint32_t vocab_size,
                               uint64_t shard_tokens, Resuming)
    : dir_(std::move(dir)),
      token_bytes_(token_bytes),
      vocab_size_(vocab_size),
      shard_tokens_(shard_tokens) {
  if (shard_tokens == 0) throw Error(Errc::kData, "tokens per shard must be > 0");
}

ShardSetWriter ShardSetWriter::resume(std::string dir, uint32_t token_bytes, uint32_t vocab_size,
                                      uint64_t shard_tokens) {
  ShardSetWriter set(std::move(dir), token_bytes, vocab_size, shard_tokens, Resuming{});
  const std::vector<std::string> paths = Corpus::list_shards(set.dir_);
  for (size_t i = 0; i < paths.size(); ++i) {
    const std::string want = (fs::path(set.dir_) / shard_name(i)).string();
    if (paths[i] != want)
      throw Error(Errc::kData,
                  set.dir_ + " holds " + paths[i] + " where " + want +
                      " should be: not the shards of one interrupted writer; write into a new "
                      "folder");
    const ShardInfo shard = read_shard_info(paths[i]);
    if (shard.header.token_bytes != token_bytes || shard.header.vocab_size != vocab_size)
      throw Error(Errc::kData,
                  fmt::format("{} has {}-byte tokens of a vocabulary of {}, not {} and {}: "
                              "another model's shards",
                              paths[i], shard.header.token_bytes, shard.header.vocab_size,
                              token_bytes, vocab_size));
    set.summary_.shard_paths.push_back(paths[i]);
    set.summary_.documents += shard.doc_offsets.size() - 1;
    set.summary_.tokens += shard.doc_offsets.back();
    set.summary_.counted += verify_shard_tokens(shard).counted_tokens;
  }
  // What an unfinished shard had written: its documents are written again.
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(set.dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(".shard-", 0) == 0 && name.find(".tmp-") != std::string::npos)
      fs::remove(entry.path(), ec);
  }
  return set;
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
