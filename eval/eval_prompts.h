// Where `hsring eval`'s prompts come from: windows of the built-in held-out documents (the
// default), the first tokens of a corpus's held-out documents (--data), or a prompt
// folder's documents (--prompts), each prompt named by its shard, document and offset.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/corpus.h"

namespace hsring::eval {

struct EvalPrompt {
  std::vector<int32_t> tokens;
  // "shard-00000.hstok#3@64": document 3 of that shard, from token 64 (no "@" from token 0).
  std::string source;
};

// The default prompts: every document of `corpus` (the built-in held-out part) cut into
// consecutive windows of `prompt_tokens` tokens (a shorter tail is dropped), taken
// round-robin over the documents (each one's first window, then each one's second, ...) up
// to `max_prompts`, so a smaller count still spans every document. Throws Error when no
// document holds a window.
std::vector<EvalPrompt> held_out_windows(const data::Corpus& corpus, uint32_t max_prompts,
                                         uint32_t prompt_tokens);

// The first `prompt_tokens` tokens of each of the last `count` documents of `corpus` (shard
// order, then document order) that hold at least that many, last document first, looking
// no further back than document `first_document` (counted over the whole corpus). Throws
// Error when no document is long enough or a read fails.
std::vector<EvalPrompt> held_out_prompts(const data::Corpus& corpus, uint32_t count,
                                         uint32_t prompt_tokens, uint64_t first_document = 0);

// A prompt folder: each document's tokens before its first trained label (the first token
// after the start that its loss mask counts: a chat's prompt before the response), or the
// whole document when its shard has no mask or the mask counts none of its tokens after
// the first, in corpus order, at most `max_prompts`; empty documents are skipped. Throws
// Error when no document gives a prompt or a read fails.
std::vector<EvalPrompt> document_prompts(const data::Corpus& corpus, uint32_t max_prompts);

inline constexpr uint32_t kDefaultMaxPrompts = 64;
inline constexpr uint32_t kDefaultPromptTokens = 32;

// Which prompts an evaluation decodes: `hsring eval`'s --prompts, --data, --max-prompts and
// --prompt-tokens, and the end of `hsring run`.
struct PromptChoice {
  std::string prompts;  // a prompt folder (document_prompts) or JSONL chats; wins over data
  std::string data;     // held-out documents of this corpus; "": the built-in held-out part
  uint32_t max_prompts = kDefaultMaxPrompts;
  uint32_t prompt_tokens = kDefaultPromptTokens;  // held-out documents' prompts only
};

// The prompts `choice` names for `model` (its name, for messages, and vocabulary): a
// prompt folder's documents, else held_out_prompts of `data`'s held-out documents
// (data::held_out_documents), else held_out_windows of the built-in held-out corpus.
// JSONL chats (a file, not a folder) are rendered into a prompt folder first by `hsring
// data prepare --prompts-only` (prepare_chat_prompts). `description` says where they came
// from. Throws Error: a missing or bad folder, a vocabulary larger than the model's, no
// prompt.
struct ChosenPrompts {
  std::vector<EvalPrompt> prompts;
  std::string description;
};
ChosenPrompts choose_prompts(const PromptChoice& choice, const std::string& model,
                             uint32_t vocab_size);

}  // namespace hsring::eval
