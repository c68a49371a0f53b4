#include "model/hf_tokenizer.h"

#include <algorithm>
#include <limits>

#include <nlohmann/json.hpp>
#include "common/error.h"

#include "model/json.h"
#include "model/model_text_file.h"

namespace hsring {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void bad(const fs::path& file, const std::string& what) {
  throw Error(Errc::kModelBadConfig, file.string() + ": " + what);
}

int64_t token_id(const nlohmann::json& v, const fs::path& file, const std::string& where) {
  if (!v.is_number() || !json_int(v) || *json_int(v) < 0 ||
      *json_int(v) > std::numeric_limits<int32_t>::max())
    bad(file, where + " is " + describe_json(v) + ", not a token id");
  return *json_int(v);
}

void name(TokenizerVocab& vocab, int64_t id, const std::string& text) {
  if (auto it = vocab.text_by_id.find(id); it != vocab.text_by_id.end())
    vocab.id_by_text.erase(it->second);
  vocab.text_by_id[id] = text;
  vocab.id_by_text[text] = id;
  vocab.next_id = std::max(vocab.next_id, id + 1);
}

void read_model_vocab(TokenizerVocab& vocab, const nlohmann::json& model, const fs::path& file) {
  const nlohmann::json* v = json_member(model, "vocab");
  if (!v || v->is_null()) return;  // a model without a vocabulary of its own
  if (v->is_object()) {            // BPE, WordPiece, WordLevel: {"text": id}
    for (const auto& [text, id] : v->items()) name(vocab, token_id(id, file, "model.vocab"), text);
  } else if (v->is_array()) {  // Unigram: [["text", score], ...], the id is the index
    int64_t id = 0;
    for (const nlohmann::json& piece : *v) {
      if (!piece.is_array() || piece.empty() || !piece[0].is_string())
        bad(file, "model.vocab holds " + describe_json(piece) + ", not a [text, score] pair");
      name(vocab, id++, piece[0].get_ref<const std::string&>());
    }
  } else {
    bad(file, "model.vocab is " + describe_json(*v) + ", not an object or a list");
  }
}

void read_added(TokenizerVocab& vocab, int64_t id, const nlohmann::json& token,
                const fs::path& file, const std::string& where) {
  const nlohmann::json* content = json_member(token, "content");
  if (!content || !content->is_string() || content->get_ref<const std::string&>().empty())
    bad(file, where + " has no \"content\" text");
  name(vocab, id, content->get_ref<const std::string&>());
  vocab.added[id] = content->get_ref<const std::string&>();
}

void read_tokenizer_json(TokenizerVocab& vocab, const fs::path& file) {
  const nlohmann::json root = parse_json(read_model_text_file(file), file.string());
  if (!root.is_object()) bad(file, "not a JSON object");
  if (const nlohmann::json* model = json_member(root, "model"); model && model->is_object())
    read_model_vocab(vocab, *model, file);
  const nlohmann::json* added = json_member(root, "added_tokens");
  if (!added || added->is_null()) return;
  if (!added->is_array()) bad(file, "added_tokens is " + describe_json(*added) + ", not a list");
  for (const nlohmann::json& token : *added) {
    const nlohmann::json* id = json_member(token, "id");
    if (!id) bad(file, "an entry of added_tokens has no \"id\"");
    read_added(vocab, token_id(*id, file, "added_tokens' id"), token, file, "added_tokens entry");
  }
}

void read_tokenizer_config(TokenizerVocab& vocab, const fs::path& file) {
  const nlohmann::json root = parse_json(read_model_text_file(file), file.string());
  if (!root.is_object()) bad(file, "not a JSON object");
  if (const nlohmann::json* decoder = json_member(root, "added_tokens_decoder");
      decoder && decoder->is_object()) {
    for (const auto& [key, token] : decoder->items()) {
      const nlohmann::json id = parse_json(key, file.string() + " added_tokens_decoder key");
      read_added(vocab, token_id(id, file, "added_tokens_decoder key \"" + key + "\""), token, file,
                 "added_tokens_decoder[\"" + key + "\"]");
    }
  }
  // "mask_token": "<mask>", or an AddedToken {"content": "<mask>", ...}, or null.
  if (const nlohmann::json* mask = json_member(root, "mask_token"); mask && !mask->is_null()) {
    const nlohmann::json* text = mask->is_object() ? json_member(*mask, "content") : mask;
    if (!text || !text->is_string() || text->get_ref<const std::string&>().empty())
      bad(file, "mask_token is " + describe_json(*mask) + ", not a token text");
    vocab.declared_mask = text->get_ref<const std::string&>();
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
