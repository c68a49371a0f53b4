// JSONL chats as evaluation prompts: `hsring data prepare --prompts-only` (this same binary)
// renders them with the model's chat template into a prompt folder, which
// document_prompts reads.
#pragma once

#include <string>

namespace hsring::eval {

// Runs `/proc/self/exe data prepare --model MODEL --dataset JSONL --prompts-only -o DIR` and
// waits for it; `dir` must not exist yet. Throws Error(kData) with the command
// and its exit status when it fails (prepare's own message is on stderr before it).
void prepare_chat_prompts(const std::string& model, const std::string& jsonl,
                          const std::string& dir);

}  // namespace hsring::eval
