#include "data/text_pack.h"

#include <cstdio>
#include <filesystem>

#include "data/corpus.h"
#include "data/data_error.h"
#include "data/file_io.h"

namespace hsring::data {

namespace fs = std::filesystem;

namespace {

bool blank(std::string_view line) {
  return line.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

std::string shard_name(size_t index) {
  char name[32];
  std::snprintf(name, sizeof name, "shard-%05zu%s", index, kShardExtension);
  return name;
}

}  // namespace

std::vector<std::string_view> split_documents(std::string_view text, bool split_blank_lines) {
  std::vector<std::string_view> docs;
  if (!split_blank_lines) {
    if (!text.empty()) docs.push_back(text);
    return docs;
  }
  size_t doc_begin = std::string_view::npos;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    end = end == std::string_view::npos ? text.size() : end + 1;
    const std::string_view line = text.substr(at, end - at);
    if (blank(line)) {
      if (doc_begin != std::string_view::npos)
        docs.push_back(text.substr(doc_begin, at - doc_begin));
      doc_begin = std::string_view::npos;
    } else if (doc_begin == std::string_view::npos) {
      doc_begin = at;
    }
    at = end;
  }
  if (doc_begin != std::string_view::npos) docs.push_back(text.substr(doc_begin));
  return docs;
}

TextPacker::TextPacker(std::string dir, const TextPackOptions& options)
    : dir_(std::move(dir)), options_(options) {
  if (options.shard_tokens == 0)
    throw DataError(DataErrc::kBadOptions, "tokens per shard must be > 0");
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw DataError(DataErrc::kIo, dir_, 0, "cannot create the folder: " + ec.message());
  if (!Corpus::list_shards(dir_).empty())
    throw DataError(DataErrc::kBadOptions,
                    dir_ + " already holds shards; pack into an empty or new folder");
}

void TextPacker::add_text(std::string_view text) {
  for (std::string_view doc : split_documents(text, options_.split_blank_lines)) add_document(doc);
}

void TextPacker::add_document(std::string_view document) {
  if (writer_ && writer_->token_count() > 0 &&
      writer_->token_count() + document.size() > options_.shard_tokens) {
    writer_->finish();
    writer_.reset();
  }
  if (!writer_) {
    const std::string path = (fs::path(dir_) / shard_name(summary_.shard_paths.size())).string();
    writer_ = std::make_unique<ShardWriter>(path, 1, 256);
    summary_.shard_paths.push_back(path);
  }
  writer_->add_text_document(document);
  ++summary_.documents;
  summary_.tokens += document.size();
}

PackSummary TextPacker::finish() {
  if (writer_) {
    writer_->finish();
    writer_.reset();
  }
  return summary_;
}

std::string read_text_file(const std::string& path) {
  const File file = File::open_read(path);
  std::string text(file.size(), '\0');
  file.read_exact(text.data(), text.size(), 0);
  return text;
}

}  // namespace hsring::data
