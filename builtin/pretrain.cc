#include "builtin/pretrain.h"

#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "checkpoint/safetensors_export.h"
#include "common/cached_folder.h"
#include "common/crc32.h"
#include "common/error.h"
#include "common/exclusive_file.h"
#include "common/random.h"
#include "common/syscheck.h"
#include "common/text_file.h"
#include "data/default_corpus.h"
#include "data/text_pack.h"
#include "train/optimizer.h"

namespace hsring::builtin {

using namespace hsring::train;  // the causal LM and its optimizer this command trains

namespace fs = std::filesystem;

namespace {

// The longest piece a batch holds is batch_tokens; config.json says so.
constexpr uint32_t kMaxPositions = 4096;

[[noreturn]] void io_error(const std::string& what) { throw Error(Errc::kModel, what); }

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

void write_text(const fs::path& path, const std::string& text) {
  try {
    write_file_atomically(path.string(), text);
  } catch (const Error& e) {  // a file of the model folder: class model, as its other files
    io_error(e.what());
  }
}

}  // namespace

ModelConfig pretrain_model_config(uint32_t layers) {
  ModelConfig c = named_model_config("tiny");
  c.name = "tiny-pretrained";
  c.vocab_size = kPretrainVocab;
  c.num_layers = layers;
  if (std::string why = validate_config(c); !why.empty())
    throw Error(Errc::kModelBadConfig, "pretrain model: " + why);
  return c;
}

std::vector<std::vector<int32_t>> builtin_corpus_documents() {
  // The training part only: the held-out documents are `hsring eval`'s prompts.
  std::vector<std::vector<int32_t>> documents;
  for (std::string_view doc : data::builtin_documents(data::BuiltinSplit::kTraining)) {
    std::vector<int32_t> tokens(doc.size());
    for (size_t i = 0; i < doc.size(); ++i) tokens[i] = int32_t(static_cast<unsigned char>(doc[i]));
    documents.push_back(std::move(tokens));
  }
  return documents;
}

CorpusBatcher::CorpusBatcher(std::vector<std::vector<int32_t>> documents, size_t batch_tokens,
                             uint64_t seed, bool shuffle)
    : documents_(std::move(documents)),
      batch_tokens_(batch_tokens),
      seed_(seed),
      shuffle_(shuffle) {
  const bool usable = std::any_of(documents_.begin(), documents_.end(),
                                  [](const std::vector<int32_t>& d) { return d.size() >= 2; });
  if (!usable || batch_tokens_ < 2)
    throw Error(Errc::kModelBadConfig,
                "pretrain: the corpus needs a document of two tokens and batches of two");
  start_epoch();
}

void CorpusBatcher::start_epoch() {
  order_.resize(documents_.size());
  for (size_t i = 0; i < order_.size(); ++i) order_[i] = i;
  if (shuffle_) {
    // Fisher-Yates from a stream that depends on (seed, epoch) alone.
    uint64_t state = mix64(seed_ ^ mix64(epoch_ + 1));
    for (size_t i = order_.size(); i > 1; --i)
      std::swap(order_[i - 1], order_[splitmix64(state) % i]);
  }
  next_doc_ = 0;
  doc_pos_ = 0;
}

CausalLmBatch CorpusBatcher::next() {
  tokens_.clear();
  positions_.clear();
  labels_.clear();
  offsets_.assign(1, 0);
  while (tokens_.size() + 1 < batch_tokens_) {
    if (next_doc_ == order_.size()) {
      ++epoch_;
      start_epoch();
    }
    const std::vector<int32_t>& doc = documents_[order_[next_doc_]];
    const size_t left = doc.size() - doc_pos_;
    const size_t take = std::min(left, batch_tokens_ - tokens_.size());
    if (take >= 2) {
      for (size_t i = 0; i < take; ++i) {
        const size_t at = doc_pos_ + i;
        tokens_.push_back(doc[at]);
        positions_.push_back(int32_t(i));
        labels_.push_back(at + 1 < doc.size() ? doc[at + 1] : kIgnoreLabel);
      }
      offsets_.push_back(int32_t(tokens_.size()));
    }
    doc_pos_ += take;
    if (doc_pos_ == doc.size()) {
      ++next_doc_;
      doc_pos_ = 0;
    }
  }
  return CausalLmBatch{tokens_, positions_, offsets_, labels_};
}

void check_pretrain_out(const fs::path& out) {
  std::error_code ec;
  const fs::file_status status = fs::symlink_status(out, ec);
  if (!fs::exists(status)) return;
  if (!fs::is_directory(status))
    io_error("--out '" + out.string() + "' exists and is not a folder; choose another --out");
  if (fs::is_empty(out, ec) || fs::exists(out / kPretrainMarker, ec)) return;
  io_error("--out '" + out.string() + "' is a folder that is not a previous `hsring model " +
           "pretrain` output (it has no " + kPretrainMarker +
           "); refusing to replace it: choose another --out or remove it");
}

std::string hf_config_json(const ModelConfig& c, uint32_t max_positions) {
  std::string j = "{\n";
  const auto field = [&j](const char* key, const std::string& value, bool last = false) {
    j += std::string("  \"") + key + "\": " + value + (last ? "\n" : ",\n");
  };
  field("architectures", "[\"Qwen3ForCausalLM\"]");
  field("model_type", "\"qwen3\"");
  field("hidden_size", std::to_string(c.hidden_size));
  field("intermediate_size", std::to_string(c.intermediate_size));
  field("num_hidden_layers", std::to_string(c.num_layers));
  field("num_attention_heads", std::to_string(c.num_heads));
  field("num_key_value_heads", std::to_string(c.num_kv_heads));
  field("head_dim", std::to_string(c.head_dim));
  field("vocab_size", std::to_string(c.vocab_size));
  field("max_position_embeddings", std::to_string(max_positions));
  field("rope_theta", number(c.rope_theta));
  field("rope_scaling", "null");
  field("rms_norm_eps", number(c.rms_norm_eps));
  field("hidden_act", "\"silu\"");
  field("attention_bias", "false");
  field("attention_dropout", "0.0");
  field("use_sliding_window", "false");
  field("sliding_window", "null");
  field("initializer_range", "0.02");
  field("tie_word_embeddings", c.tie_embeddings ? "true" : "false");
  field("use_cache", "true");
  field("torch_dtype", "\"float32\"", true);
  return j + "}\n";
}

void write_pretrained_folder(const fs::path& out, const ModelConfig& config,
                             const ModelWeights& weights, const std::string& marker_json) {
  check_pretrain_out(out);
  const fs::path target = fs::absolute(out).lexically_normal();
  const fs::path parent = target.parent_path();
  const std::string base = target.filename().string();
  std::error_code ec;
  fs::create_directories(parent, ec);
  // New folders of random names (common/exclusive_file.h): a name planted in a shared
  // parent is never written into. `old` is empty, so the rename below replaces it.
  const auto sibling = [&](const char* kind) {
    const ExclusiveFolder f = create_exclusive_folder(parent.string(), "." + base + kind);
    if (f.error != 0)
      throw sys_error(Errc::kModel, f.error, fmt::format("cannot create '{}'", f.path));
    return fs::path(f.path);
  };
  const fs::path staging = sibling(".tmp-");
  try {
    write_text(staging / "config.json", hf_config_json(config, kMaxPositions));
    std::vector<checkpoint::Tensor> tensors;
    for_each_weight(config, weights,
                    [&tensors](const std::string& name, const std::vector<int64_t>& shape,
                               const std::vector<float>& values) {
                      tensors.push_back({name, shape, values});
                    });
    checkpoint::ExportOptions options;
    options.metadata["format"] = "pt";  // transformers refuses safetensors without it
    options.io.use_io_uring = false;
    checkpoint::export_safetensors((staging / "model.safetensors").string(), tensors, options);
    write_text(staging / kPretrainMarker, marker_json);
    // A previous output moves aside before the new one takes its name: a crash between
    // leaves the old one under `old`, never a half-written `out`.
    const bool replace = fs::exists(target, ec);
    const fs::path old = replace ? sibling(".old-") : fs::path();
    if (replace) fs::rename(target, old);
    fs::rename(staging, target);
    if (replace) fs::remove_all(old, ec);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(staging, ec);
    io_error("cannot write the pretrained folder '" + out.string() + "': " + e.what());
  } catch (...) {
    fs::remove_all(staging, ec);
    throw;
  }
}

PretrainResult run_pretrain(const PretrainOptions& o,
                            const std::function<void(const PretrainProgress&)>& progress) {
  if (o.steps == 0) throw Error(Errc::kModelBadConfig, "pretrain: --steps must be >= 1");
  if (o.batch_tokens < 2 || o.batch_tokens > kMaxPositions)
    throw Error(Errc::kModelBadConfig, "pretrain: batch tokens must be in [2, 4096]");
  if (!(o.seconds >= 0)) throw Error(Errc::kModelBadConfig, "pretrain: --seconds must be >= 0");
  check_pretrain_out(o.out);  // refuse before spending a minute

  PretrainResult result;
  result.out = o.out;
  result.config = pretrain_model_config(o.layers);
  CausalLm model(result.config, o.seed, o.threads);
  AdamWOptions adam;
  adam.schedule.peak_lr = o.peak_lr;
  adam.schedule.min_lr = o.min_lr;
  adam.schedule.warmup_steps = std::min(o.warmup_steps, o.steps);
  adam.schedule.total_steps = o.steps;
  adam.weight_decay = 0.01;
  AdamW optimizer(adam, model.layout());

  std::vector<std::vector<int32_t>> documents = builtin_corpus_documents();
  CorpusBatcher eval_batches(documents, o.batch_tokens, 0, /*shuffle=*/false);
  const CausalLmBatch eval = eval_batches.next();
  result.eval_loss_start = model.forward(eval).loss;
  CorpusBatcher batches(std::move(documents), o.batch_tokens, o.seed);

  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  const auto elapsed = [&start] {
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  const uint64_t tail_from = o.steps - std::max<uint64_t>(1, o.steps / 10);
  double tail_sum = 0, report_sum = 0;
  uint64_t tail_count = 0, report_count = 0;
  for (uint64_t step = 0; step < o.steps; ++step) {
    // Checked from the second step on: a capped run still makes one update.
    if (step > 0 && o.seconds > 0 && elapsed() >= o.seconds) {
      result.stopped_by_time = true;
      break;
    }
    const CausalLmBatch batch = batches.next();
    model.zero_grads();
    const LossStats stats = model.forward_backward(batch);
    const UpdateStats update = optimizer.update(model.params(), model.grads());
    result.tokens += batch.rows();
    result.steps = step + 1;
    if (step == 0) result.first_loss = stats.loss;
    if (step >= tail_from) {
      tail_sum += stats.loss;
      ++tail_count;
    }
    report_sum += stats.loss;
    ++report_count;
    if (progress && o.log_every && (result.steps % o.log_every == 0 || result.steps == o.steps)) {
      const double t = elapsed();
      progress({result.steps, o.steps, report_sum / double(report_count), update.lr,
                double(result.tokens) / t, t});
      report_sum = 0;
      report_count = 0;
    }
    if (!std::isfinite(stats.loss))
      throw Error(Errc::kModelBadConfig,
                  fmt::format("pretrain: the loss diverged at step {}; try a lower rate", step));
  }
  result.seconds = elapsed();
  result.tokens_per_s = result.seconds > 0 ? double(result.tokens) / result.seconds : 0;
  // Stopped by the time cap before the last tenth: the last loss is the final step's own.
  result.last_loss = tail_count ? tail_sum / double(tail_count)
                                : report_sum / double(std::max<uint64_t>(report_count, 1));
  const LossStats end = model.forward(eval);
  result.eval_loss_end = end.loss;
  result.eval_agreement_end = end.agreement;

  std::string marker = "{\n";
  marker += "  \"format\": \"hsring-pretrain-v1\",\n";
  marker += "  \"corpus\": \"built-in (data/corpus/*.txt, a document per paragraph, bytes)\",\n";
  marker += "  \"reserved_mask_token_id\": " + std::to_string(kReservedMaskToken) + ",\n";
  marker += "  \"seed\": " + std::to_string(o.seed) + ",\n";
  marker += "  \"steps\": " + std::to_string(result.steps) + ",\n";
  marker += "  \"planned_steps\": " + std::to_string(o.steps) + ",\n";
  marker += "  \"batch_tokens\": " + std::to_string(o.batch_tokens) + ",\n";
  marker += "  \"tokens\": " + std::to_string(result.tokens) + ",\n";
  marker += "  \"seconds\": " + number(result.seconds) + ",\n";
  marker += "  \"first_loss\": " + number(result.first_loss) + ",\n";
  marker += "  \"last_loss\": " + number(result.last_loss) + ",\n";
  marker += "  \"eval_loss_start\": " + number(result.eval_loss_start) + ",\n";
  marker += "  \"eval_loss_end\": " + number(result.eval_loss_end) + "\n";
  marker += "}\n";
  write_pretrained_folder(o.out, result.config,
                          causal_lm_weights(result.config, model.layout(), model.params()), marker);
  return result;
}

}  // namespace hsring::builtin

namespace hsring::builtin {

namespace {

// Names the cached folder after what determines its content: bump kBuiltinRules when the
// model, the training step or the defaults change, so no binary reuses another's target.
std::string builtin_tag(const PretrainOptions& o) {
  constexpr std::string_view kBuiltinRules = "hsring-builtin-target:v1";
  std::string key(kBuiltinRules);
  key += ":" + std::to_string(o.layers) + ":" + std::to_string(o.steps) + ":" +
         std::to_string(o.seed) + ":" + std::to_string(o.batch_tokens) + ":" +
         std::to_string(o.peak_lr) + ":" + std::to_string(o.min_lr) + ":" +
         std::to_string(o.warmup_steps);
  uint32_t crc = crc32(key.data(), key.size());
  for (std::string_view doc : data::builtin_documents(data::BuiltinSplit::kTraining))
    crc = crc32_update(crc, doc.data(), doc.size());
  char tag[16];
  std::snprintf(tag, sizeof tag, "%08x", crc);
  return tag;
}

bool holds_a_target(const fs::path& dir) {
  std::error_code ec;
  return fs::exists(dir / kPretrainMarker, ec) && fs::exists(dir / "config.json", ec) &&
         fs::exists(dir / "model.safetensors", ec);
}

}  // namespace

std::string builtin_target_dir(const std::string& cache_root,
                               const std::function<void(const PretrainProgress&)>& progress) {
  PretrainOptions o;
  o.seconds = 0;  // by the step count alone: the same folder on every machine
  o.log_every = 20;
  const fs::path root = cache_root.empty() ? data::default_cache_root() : cache_root;
  const fs::path dir = root / ("builtin-target-" + builtin_tag(o));
  return cached_folder(
             dir, holds_a_target,
             [&](const fs::path& staging) {
               o.out = staging;
               run_pretrain(o, progress);
             },
             Errc::kModel)
      .string();
}

std::string resolve_model_spec(const std::string& spec) {
  if (spec != kBuiltinModel) return spec;
  bool said = false;
  return builtin_target_dir("", [&](const PretrainProgress& p) {
    if (!said)
      std::fprintf(stderr,
                   "[hsring] training the built-in target on the built-in corpus "
                   "(first use only; ~45 s on two cores)\n");
    said = true;
    std::fprintf(stderr, "[hsring]   step %llu/%llu  loss %.3f\n", (unsigned long long)p.step,
                 (unsigned long long)p.total_steps, p.loss);
  });
}

}  // namespace hsring::builtin
