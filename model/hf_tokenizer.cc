#include "model/hf_tokenizer.h"

#include <algorithm>
#include <limits>

#include "common/error.h"
#include "model/json.h"
#include "model/model_text_file.h"

namespace hsring {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void bad(const fs::path& file, const std::string& what) {
  throw Error(Errc::kModelBadConfig, file.string() + ": " + what);
}

int64_t token_id(const JsonValue& v, const fs::path& file, const std::string& where) {
  if (!v.is_number() || !v.as_int() || *v.as_int() < 0 ||
      *v.as_int() > std::numeric_limits<int32_t>::max())
    bad(file, where + " is " + describe_json(v) + ", not a token id");
  return *v.as_int();
}

void name(TokenizerVocab& vocab, int64_t id, const std::string& text) {
  if (auto it = vocab.text_by_id.find(id); it != vocab.text_by_id.end())
    vocab.id_by_text.erase(it->second);
  vocab.text_by_id[id] = text;
  vocab.id_by_text[text] = id;
  vocab.next_id = std::max(vocab.next_id, id + 1);
}

void read_model_vocab(TokenizerVocab& vocab, const JsonValue& model, const fs::path& file) {
  const JsonValue* v = model.find("vocab");
  if (!v || v->is_null()) return;  // a model without a vocabulary of its own
  if (v->is_object()) {            // BPE, WordPiece, WordLevel: {"text": id}
    for (const auto& [text, id] : v->as_object())
      name(vocab, token_id(id, file, "model.vocab"), text);
  } else if (v->is_array()) {  // Unigram: [["text", score], ...], the id is the index
    int64_t id = 0;
    for (const JsonValue& piece : v->as_array()) {
      if (!piece.is_array() || piece.as_array().empty() || !piece.as_array()[0].is_string())
        bad(file, "model.vocab holds " + describe_json(piece) + ", not a [text, score] pair");
      name(vocab, id++, piece.as_array()[0].as_string());
    }
  } else {
    bad(file, "model.vocab is " + describe_json(*v) + ", not an object or a list");
  }
}

void read_added(TokenizerVocab& vocab, int64_t id, const JsonValue& token, const fs::path& file,
                const std::string& where) {
  const JsonValue* content = token.find("content");
  if (!content || !content->is_string() || content->as_string().empty())
    bad(file, where + " has no \"content\" text");
  name(vocab, id, content->as_string());
  vocab.added[id] = content->as_string();
}

void read_tokenizer_json(TokenizerVocab& vocab, const fs::path& file) {
  const JsonValue root = parse_json(read_model_text_file(file), file.string());
  if (!root.is_object()) bad(file, "not a JSON object");
  if (const JsonValue* model = root.find("model"); model && model->is_object())
    read_model_vocab(vocab, *model, file);
  const JsonValue* added = root.find("added_tokens");
  if (!added || added->is_null()) return;
  if (!added->is_array()) bad(file, "added_tokens is " + describe_json(*added) + ", not a list");
  for (const JsonValue& token : added->as_array()) {
    const JsonValue* id = token.find("id");
    if (!id) bad(file, "an entry of added_tokens has no \"id\"");
    read_added(vocab, token_id(*id, file, "added_tokens' id"), token, file, "added_tokens entry");
  }
}

void read_tokenizer_config(TokenizerVocab& vocab, const fs::path& file) {
  const JsonValue root = parse_json(read_model_text_file(file), file.string());
  if (!root.is_object()) bad(file, "not a JSON object");
  if (const JsonValue* decoder = root.find("added_tokens_decoder");
      decoder && decoder->is_object()) {
    for (const auto& [key, token] : decoder->as_object()) {
      const JsonValue id = parse_json(key, file.string() + " added_tokens_decoder key");
      read_added(vocab, token_id(id, file, "added_tokens_decoder key \"" + key + "\""), token, file,
                 "added_tokens_decoder[\"" + key + "\"]");
    }
  }
  // "mask_token": "<mask>", or an AddedToken {"content": "<mask>", ...}, or null.
  if (const JsonValue* mask = root.find("mask_token"); mask && !mask->is_null()) {
    const JsonValue* text = mask->is_object() ? mask->find("content") : mask;
    if (!text || !text->is_string() || text->as_string().empty())
      bad(file, "mask_token is " + describe_json(*mask) + ", not a token text");
    vocab.declared_mask = text->as_string();
  }
}

}  // namespace

const std::string* TokenizerVocab::text_of(int64_t id) const {
  const auto it = text_by_id.find(id);
  return it == text_by_id.end() ? nullptr : &it->second;
}

std::optional<int64_t> TokenizerVocab::id_of(const std::string& text) const {
  const auto it = id_by_text.find(text);
  return it == id_by_text.end() ? std::nullopt : std::optional<int64_t>(it->second);
}

std::optional<TokenizerVocab> read_tokenizer_vocab(const fs::path& dir) {
  const fs::path json = dir / "tokenizer.json", config = dir / "tokenizer_config.json";
  std::error_code ec;
  const bool has_json = fs::is_regular_file(json, ec), has_config = fs::is_regular_file(config, ec);
  if (!has_json && !has_config) return std::nullopt;
  TokenizerVocab vocab;
  vocab.source = has_json ? json : config;
  if (has_json) read_tokenizer_json(vocab, json);
  // After tokenizer.json: transformers' added_tokens_decoder is what it loads last.
  if (has_config) read_tokenizer_config(vocab, config);
  return vocab;
}

}  // namespace hsring
