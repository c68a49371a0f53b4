#include "data/text_pack.h"

#include "data/file_io.h"

namespace hsring::data {

namespace {

bool blank(std::string_view line) {
  return line.find_first_not_of(" \t\r\n") == std::string_view::npos;
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
    : options_(options), writer_(std::move(dir), 1, 256, options.shard_tokens) {}

void TextPacker::add_text(std::string_view text) {
  for (std::string_view doc : split_documents(text, options_.split_blank_lines))
    writer_.add_text_document(doc);
}

PackSummary TextPacker::finish() { return writer_.finish(); }

std::string read_corpus_file(const std::string& path) {
  const File file = File::open_read(path);
  std::string text(file.size(), '\0');
  file.read_exact(text.data(), text.size(), 0);
  return text;
}

}  // namespace hsring::data
