// `hsring model pretrain`: trains a small Qwen3-style causal LM (train/causal_lm.h) on the
// built-in corpus (data/corpus/*.txt, one document per paragraph, byte-level tokens) and
// writes it as a Hugging Face folder (config.json + model.safetensors) that
// open_cpu_model and transformers' Qwen3ForCausalLM both load (docs/target-model.md).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "train/causal_lm.h"

namespace hsring::builtin {

// The vocabulary: the 256 byte values, plus token 256, which never occurs in the data. It
// is reserved for the DFlash drafter's mask_token_id (the block positions still to draft).
inline constexpr uint32_t kPretrainVocab = 257;
inline constexpr int32_t kReservedMaskToken = 256;

// The file that marks a folder as this command's output: only such a folder (or an empty
// one) may be replaced by a later pretrain.
inline constexpr const char* kPretrainMarker = "hsring-pretrain.json";

// The `tiny` preset (H 128, 4 / 2 heads of 32, intermediate 384, QK-norm, tied) with the
// 257-token vocabulary and `layers` decoder layers. Named "tiny-pretrained".
ModelConfig pretrain_model_config(uint32_t layers);

// The built-in corpus as byte-token documents, in file order.
std::vector<std::vector<int32_t>> builtin_corpus_documents();

// Packed batches of at most `batch_tokens` tokens cut from a stream of documents: each
// epoch visits every document once, in an order drawn from (seed, epoch) (file order when
// `shuffle` is false). A document that does not fit the rest of a batch is cut; its rest
// opens the next batch as a piece of its own (positions from 0 again, as attention cannot
// see the part before the cut). Labels are the next byte of the document; a document's last
// token has none (kIgnoreLabel). Pieces of one token are dropped.
class CorpusBatcher {
 public:
  // REQUIRES: documents hold at least one document of two tokens; batch_tokens >= 2.
  CorpusBatcher(std::vector<std::vector<int32_t>> documents, size_t batch_tokens, uint64_t seed,
                bool shuffle = true);
  // Fills the next batch (the spans stay valid until the next call).
  train::CausalLmBatch next();
  uint64_t epoch() const { return epoch_; }

 private:
  void start_epoch();

  std::vector<std::vector<int32_t>> documents_;
  size_t batch_tokens_;
  uint64_t seed_;
  bool shuffle_;
  std::vector<size_t> order_;
  size_t next_doc_ = 0;  // index into order_ of the document being cut
  size_t doc_pos_ = 0;   // tokens of it already used
  uint64_t epoch_ = 0;
  std::vector<int32_t> tokens_, positions_, offsets_, labels_;
};

struct PretrainOptions {
  std::filesystem::path out = "tiny-pretrained";
  uint32_t layers = 2;
  // 140 x 512 tokens: about 45 s on two idle cores, two passes over the corpus.
  uint64_t steps = 140;
  // A wall-clock cap on training (keeps a busy machine within a minute); 0: none. A run that
  // ends by its step count is deterministic in the seed; one cut short is not. The first
  // update is always made.
  double seconds = 50;
  uint64_t seed = 0;
  uint32_t threads = 0;  // 0: every hardware thread
  size_t batch_tokens = 512;
  double peak_lr = 3e-3;
  double min_lr = 3e-4;
  uint64_t warmup_steps = 10;
  uint64_t log_every = 20;  // progress every this many steps; 0: never
};

struct PretrainProgress {
  uint64_t step = 0;  // updates done
  uint64_t total_steps = 0;
  double loss = 0;  // mean loss of the updates since the last report
  double lr = 0;
  double tokens_per_s = 0;  // training tokens per second so far
  double elapsed_s = 0;
};

struct PretrainResult {
  std::filesystem::path out;
  ModelConfig config;
  uint64_t steps = 0;   // updates applied
  uint64_t tokens = 0;  // training tokens (positions) seen
  bool stopped_by_time = false;
  double seconds = 0;  // training time, evaluations and writing excluded
  double tokens_per_s = 0;
  double first_loss = 0;  // the loss of the first training batch
  // The mean loss of the last tenth of the planned updates, or (stopped by the time cap
  // before them) of the updates since the last progress report.
  double last_loss = 0;
  // The loss on one fixed batch (the corpus's first batch_tokens tokens, in file order)
  // before training and after it: the same tokens measured twice.
  double eval_loss_start = 0;
  double eval_loss_end = 0;
  double eval_agreement_end = 0;
};

// Refuses, before any work, an --out that exists and is neither an empty folder nor a
// previous pretrain output. Throws Error(kModel) with the remedy.
void check_pretrain_out(const std::filesystem::path& out);

// Trains and writes the folder. The folder appears complete or not at all: it is written
// beside `out` under a temporary name and renamed into place (a previous output is moved
// aside first and removed after). Throws Error (kBadConfig for bad options, kIo).
PretrainResult run_pretrain(const PretrainOptions& options,
                            const std::function<void(const PretrainProgress&)>& progress = {});

// Writes config, weights (fp32 safetensors) and the marker into `out` as run_pretrain does.
// `marker_json` is the marker file's whole text.
void write_pretrained_folder(const std::filesystem::path& out, const ModelConfig& config,
                             const ModelWeights& weights, const std::string& marker_json);

// The model spec that names the built-in trained target: `hsring run`'s and `hsring
// eval`'s default --model.
inline constexpr char kBuiltinModel[] = "builtin";

// The folder of the built-in trained target under the cache root ("" for
// data::default_cache_root()): run_pretrain with the default options and no time cap, so
// the folder is a pure function of this binary's code and corpus, trained on first use
// (~45 s on two cores, `progress` says how far) and reused after. Safe against concurrent
// callers: each trains into a private folder and renames it into place; the loser of a
// race uses the winner's. Throws Error.
std::string builtin_target_dir(const std::string& cache_root = "",
                               const std::function<void(const PretrainProgress&)>& progress = {});
// `spec` with kBuiltinModel replaced by builtin_target_dir() (building it, saying so on
// stderr); any other spec as it is.
std::string resolve_model_spec(const std::string& spec);

// The config.json text of `config` for transformers (Qwen3ForCausalLM, float32).
std::string hf_config_json(const ModelConfig& config, uint32_t max_position_embeddings);

}  // namespace hsring::builtin
