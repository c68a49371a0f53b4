// The default job's training data: the built-in target's own greedy continuations of the
// built-in corpus. A drafter is measured by how often the target accepts its drafts, so it
// learns best from what the target itself says (as DFlash and SpecForge train on
// target-regenerated responses); trained on the corpus's own text, the default job's
// drafter rarely got a second token of a block accepted.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace hsring::eval {

// The data spec of the built-in target's continuations: `hsring run`'s data when the model
// is the built-in target and no --data is given.
inline constexpr char kBuiltinData[] = "builtin";

// What the continuations are: each training document of the built-in corpus cut to its first
// kBuiltinPromptTokens tokens and continued for kBuiltinNewTokens by greedy decoding, the
// prompt masked out of the loss (generate_continuations). The held-out prompts `hsring
// eval` decodes have the same shape.
inline constexpr uint32_t kBuiltinPromptTokens = 64;
inline constexpr uint32_t kBuiltinNewTokens = 64;

// The folder of those shards under the cache root ("" for data::default_cache_root()),
// generated on first use with the built-in target (train::builtin_target_dir, trained first
// if missing; ~40 s of decoding on two cores, `progress(done, total)` after each document)
// and reused after. Named after the target's folder and the rules above, so it is a pure
// function of this binary's code and corpus. Safe against concurrent callers: each
// generates into a private folder and renames it into place; the loser of a race uses the
// winner's. Throws Error.
std::string builtin_data_dir(const std::string& cache_root = "",
                             const std::function<void(uint64_t, uint64_t)>& progress = {});

// builtin_data_dir(), saying on stderr that it is being generated, and how far, when it is.
std::string resolve_builtin_data();

// The same continuations of the built-in corpus's held-out documents (7; a few seconds to
// generate, then cached as builtin-heldout-data-<tag>): the held-out batches of a default
// job's --eval-every curves, shaped as its training data is.
std::string builtin_heldout_data_dir(const std::string& cache_root = "");

// A run's token data: `data` as given, but kBuiltinData, and "" with the built-in target
// (`model_spec` as given, before train::resolve_model_spec), are resolve_builtin_data()'s
// folder; "" with another model stays "" (the built-in corpus). `builtin` says which.
struct RunData {
  std::string dir;
  bool builtin = false;
};
RunData resolve_run_data(const std::string& data, const std::string& model_spec);

// Where a run's held-out curves (--eval-every) read their batches: the built-in held-out
// continuations for the built-in data, the built-in corpus's held-out part for the
// built-in corpus (data.dir ""), else the held-out documents of the run's own data.
struct HeldOutData {
  std::string dir;
  bool held_out_only = false;  // only dir's held-out documents (data/held_out.h)
};
HeldOutData resolve_held_out_data(const RunData& data);

}  // namespace hsring::eval
