// The token the DFlash drafter's masked block positions read, chosen so that the engines
// that resolve it by its text (SGLang's dflash_config.mask_token, looked up in the target's
// tokenizer) and those that read its id (mask_token_id) serve the token it was trained
// with (docs/dflash-export.md, "The mask token").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "model/hf_tokenizer.h"

namespace hsring::train {

// The text SGLang assumes when a config names none, and adds to the target's tokenizer
// when the tokenizer lacks it; it then gets the tokenizer's next id.
inline constexpr const char* kAddedMaskText = "<|MASK|>";

struct MaskToken {
  int32_t id = 0;
  std::string text;     // "" when the target has no tokenizer: only the id is exported
  std::string how;      // one line for the log: which rule chose it
  std::string warning;  // "" or why the token may be served badly
};

// The mask token of a target with `vocab_size` embedding rows and `tokenizer` (nullptr:
// the target has none). `requested` >= 0 is --mask-token-id; < 0 lets hsring choose, first
// of: the tokenizer's declared mask token; a token "<|MASK|>" it already has; its reserved
// or unused special token of the highest id ("<|reserved_special_token_247|>" in Llama 3,
// "<unused98>" in Gemma); "<|MASK|>" at the tokenizer's next id when that is an embedding
// row (Qwen's vocabularies keep rows past the tokenizer's last token); without a tokenizer,
// the vocabulary's last row. Throws Error(kUsage): `requested` outside the vocabulary or
// with no text in the tokenizer (an older SGLang would serve another token), or no token
// can be chosen (the remedy: --mask-token-id naming a token the data never holds).
MaskToken choose_mask_token(const TokenizerVocab* tokenizer, uint32_t vocab_size,
                            int64_t requested);

// The text that resolves to `id` in `tokenizer`: the token's own text, or kAddedMaskText
// when `id` is the tokenizer's next id (where adding it puts it); nullopt otherwise.
std::optional<std::string> mask_token_text(const TokenizerVocab& tokenizer, int64_t id);

}  // namespace hsring::train
