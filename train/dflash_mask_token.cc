#include "train/dflash_mask_token.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "common/error.h"

namespace hsring::train {
namespace {

bool is_spare(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  return text.find("reserved") != std::string::npos || text.find("unused") != std::string::npos;
}

MaskToken named(const TokenizerVocab& tokenizer, int64_t id, std::string how) {
  return {int32_t(id), *tokenizer.text_of(id), std::move(how), ""};
}

MaskToken requested_token(const TokenizerVocab* tokenizer, uint32_t vocab_size, int64_t id) {
  if (id >= int64_t(vocab_size))
    throw Error(
        Errc::kUsage,
        fmt::format("--mask-token-id {} is outside the target's vocabulary of {}", id, vocab_size));
  if (!tokenizer) return {int32_t(id), "", "--mask-token-id (the target has no tokenizer)", ""};
  const std::optional<std::string> text = mask_token_text(*tokenizer, id);
  if (!text)
    throw Error(Errc::kUsage,
                fmt::format("--mask-token-id {} has no text in the target's tokenizer ({}): SGLang "
                            "versions that resolve dflash_config.mask_token by its text would "
                            "serve the drafter with another token. Name a token the tokenizer has "
                            "(a reserved special token), or leave --mask-token-id out and hsring "
                            "chooses one",
                            id, tokenizer->source.string()));
  MaskToken m{int32_t(id), *text, "--mask-token-id", ""};
  if (!tokenizer->added.count(id) && id != tokenizer->next_id)
    m.warning = fmt::format(
        "mask token {} ({}) is an ordinary token of the vocabulary: text that holds it looks like "
        "a masked position to the drafter",
        id, *text);
  return m;
}

}  // namespace

std::optional<std::string> mask_token_text(const TokenizerVocab& tokenizer, int64_t id) {
  if (const std::string* text = tokenizer.text_of(id)) return *text;
  if (id == tokenizer.next_id && !tokenizer.id_of(kAddedMaskText)) return kAddedMaskText;
  return std::nullopt;
}

MaskToken choose_mask_token(const TokenizerVocab* tokenizer, uint32_t vocab_size,
                            int64_t requested) {
  if (requested >= 0) return requested_token(tokenizer, vocab_size, requested);
  if (!tokenizer)
    return {int32_t(vocab_size) - 1, "", "the vocabulary's last row (the target has no tokenizer)",
            ""};
  const auto row = [&](std::optional<int64_t> id) { return id && *id < int64_t(vocab_size); };
  if (tokenizer->declared_mask && row(tokenizer->id_of(*tokenizer->declared_mask)))
    return named(*tokenizer, *tokenizer->id_of(*tokenizer->declared_mask),
                 "the tokenizer's own mask token");
  if (row(tokenizer->id_of(kAddedMaskText)))
    return named(*tokenizer, *tokenizer->id_of(kAddedMaskText), "the tokenizer's <|MASK|> token");
  for (auto it = tokenizer->added.rbegin(); it != tokenizer->added.rend(); ++it)
    if (it->first < int64_t(vocab_size) && is_spare(it->second))
      return named(*tokenizer, it->first, "the tokenizer's last reserved special token");
  if (tokenizer->next_id < int64_t(vocab_size))
    return {int32_t(tokenizer->next_id), kAddedMaskText,
            "<|MASK|> at the tokenizer's next id, an embedding row no text uses (SGLang adds it "
            "there)",
            ""};
  throw Error(Errc::kUsage,
              fmt::format("no DFlash mask token in the target's tokenizer ({}): it declares no "
                          "mask token, has no reserved or unused special token, and every one of "
                          "the {} embedding rows has a text. Pass --mask-token-id with a token the "
                          "training data never holds",
                          tokenizer->source.string(), vocab_size));
}

}  // namespace hsring::train
