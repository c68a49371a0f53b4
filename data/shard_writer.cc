#include "data/shard_writer.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstring>

#include "common/crc32.h"
#include "common/error.h"
#include "common/syscheck.h"

namespace hsring::data {

namespace {
constexpr size_t kFlushBytes = 1 << 20;
}

ShardWriter::ShardWriter(std::string path, uint32_t token_bytes, uint32_t vocab_size)
    : path_(std::move(path)) {
  if (token_bytes != 1 && token_bytes != 2 && token_bytes != 4)
    throw Error(Errc::kData, "token width must be 1, 2 or 4 bytes");
  header_.token_bytes = token_bytes;
  header_.vocab_size = vocab_size;
  const uint64_t width_limit = token_bytes == 4 ? (1ull << 31) : (1ull << (8 * token_bytes));
  if (vocab_size > width_limit)
    throw Error(Errc::kData, fmt::format("a vocabulary of {} does not fit {}-byte tokens",
                                         vocab_size, token_bytes));
  token_limit_ = vocab_size ? vocab_size : width_limit;
  file_ = File::create_temporary_beside(path_);
  temp_path_ = file_.path();
  buffer_.reserve(kFlushBytes + 4);
}

ShardWriter::~ShardWriter() {
  if (!finished_) std::remove(temp_path_.c_str());
}

void ShardWriter::check_token(uint32_t token) const {
  if (token >= token_limit_)
    throw Error(Errc::kData, path_, kShardHeaderSize + header_.token_count * header_.token_bytes,
                fmt::format("token {} does not fit below {}", token, token_limit_));
}

void ShardWriter::append_token(uint32_t token) {
  check_token(token);
  // Little-endian: the token's low bytes, as many as the width.
  const auto* bytes = reinterpret_cast<const std::byte*>(&token);
  buffer_.insert(buffer_.end(), bytes, bytes + header_.token_bytes);
  ++header_.token_count;
  if (buffer_.size() >= kFlushBytes) flush();
}

void ShardWriter::append_mask(std::span<const uint8_t> counted, uint64_t tokens) {
  const uint64_t first = header_.token_count - tokens;  // the document's first token
  mask_.resize((header_.token_count + 7) / 8, 0);
  for (uint64_t i = 0; i < tokens; ++i) {
    const bool on = counted.empty() || counted[i] != 0;
    masked_ = masked_ || !on;
    if (on) mask_[(first + i) / 8] |= uint8_t(1u << ((first + i) % 8));
  }
}

void ShardWriter::add_document(std::span<const uint32_t> tokens, std::span<const uint8_t> counted) {
  if (!counted.empty() && counted.size() != tokens.size())
    throw Error(Errc::kData, fmt::format("{}: a loss mask of {} flags for {} tokens", path_,
                                         counted.size(), tokens.size()));
  // Checked first so that a refused document leaves the shard as it was.
  for (uint32_t token : tokens) check_token(token);
  for (uint32_t token : tokens) append_token(token);
  append_mask(counted, tokens.size());
  offsets_.push_back(header_.token_count);
  ++header_.doc_count;
}

void ShardWriter::add_text_document(std::string_view text) {
  for (char c : text) append_token(uint32_t(static_cast<unsigned char>(c)));
  append_mask({}, text.size());
  offsets_.push_back(header_.token_count);
  ++header_.doc_count;
}

void ShardWriter::flush() {
  tokens_crc_ = crc32_update(tokens_crc_, buffer_.data(), buffer_.size());
  file_.write_all(buffer_.data(), buffer_.size(), written_);
  written_ += buffer_.size();
  buffer_.clear();
}

void ShardWriter::finish() {
  flush();
  header_.tokens_crc = tokens_crc_;
  header_.offsets_crc = crc32(offsets_.data(), offsets_.size() * sizeof(uint64_t));
  file_.write_all(offsets_.data(), offsets_.size() * sizeof(uint64_t), written_);
  written_ += offsets_.size() * sizeof(uint64_t);
  header_.version = masked_ ? kShardVersion : kShardVersionNoMask;
  if (masked_) {
    header_.flags = kFlagLossMask;
    header_.mask_crc = crc32(mask_.data(), mask_.size());
    file_.write_all(mask_.data(), mask_.size(), written_);
  }
  const auto header = encode_header(header_);
  file_.write_all(header.data(), header.size(), 0);
  file_.sync();
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0)
    throw sys_error(Errc::kData, errno, path_, 0, "rename");
  finished_ = true;
}

}  // namespace hsring::data
