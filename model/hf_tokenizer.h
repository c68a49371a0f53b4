// The token texts of a Hugging Face model folder's tokenizer, as far as a serving engine
// maps a token's text to its id: tokenizer.json's model vocabulary and added tokens, and
// tokenizer_config.json's added_tokens_decoder and mask_token. It does not tokenize text.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>

namespace hsring {

struct TokenizerVocab {
  std::filesystem::path source;  // the file the vocabulary came from, for messages
  // Every id the tokenizer names, with its text as transformers' get_vocab() spells it
  // (byte-level BPE tokens in their byte-to-unicode form, e.g. "Ġthe").
  std::unordered_map<int64_t, std::string> text_by_id;
  std::unordered_map<std::string, int64_t> id_by_text;
  // The added (mostly special) tokens by id, in id order: where reserved tokens live.
  std::map<int64_t, std::string> added;
  // tokenizer_config.json's mask_token, when it declares one.
  std::optional<std::string> declared_mask;
  // One past the largest id: the id transformers and the tokenizers library give the
  // next token added to it (add_special_tokens), as SGLang does with an unknown mask text.
  int64_t next_id = 0;

  const std::string* text_of(int64_t id) const;
  std::optional<int64_t> id_of(const std::string& text) const;
};

// The tokenizer of model folder `dir`, or nullopt when it has neither tokenizer.json nor
// tokenizer_config.json. Throws Error: kModel when a file cannot be read or is not JSON,
// kModelBadConfig (naming the file and the key) when a vocabulary or
// an added token is malformed. An added token's text wins over the vocabulary's for its id,
// as in transformers' get_vocab().
std::optional<TokenizerVocab> read_tokenizer_vocab(const std::filesystem::path& dir);

}  // namespace hsring
