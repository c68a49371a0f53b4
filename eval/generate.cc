#include "eval/generate.h"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/regular_file.h"
#include "data/token_batch.h"
#include "eval/speculative_decode.h"
#include "model/json.h"

namespace hsring::eval {

namespace fs = std::filesystem;

namespace {

// generation_config.json is a few hundred bytes; a larger one is not what we read.
constexpr size_t kMaxConfigBytes = 1u << 20;

// Document `d` of shard `s`, its first `limit` tokens (0: all).
std::vector<int32_t> read_document(const data::Corpus& corpus, uint32_t s, size_t d,
                                   uint32_t limit) {
  const data::ShardInfo& shard = corpus.shards()[s];
  const uint64_t begin = shard.doc_offsets[d], end = shard.doc_offsets[d + 1];
  uint64_t length = end - begin;
  if (limit != 0 && length > limit) length = limit;
  if (length > UINT32_MAX)
    throw Error(Errc::kData, shard.path,
                shard.header.tokens_offset() + begin * shard.header.token_bytes,
                fmt::format("a document of {} tokens is too long for a prompt; cap it with "
                            "--prompt-tokens",
                            length));
  const data::Piece piece{s, uint32_t(length), begin};
  data::BatchRef ref;
  ref.pieces = std::span<const data::Piece>(&piece, 1);
  ref.token_count = uint32_t(length);
  return data::read_batch(corpus, ref).tokens;
}

void add_eos_ids(const fs::path& file, std::vector<int32_t>& out) {
  std::error_code ec;
  if (!fs::exists(file, ec)) return;
  const std::string text = read_regular_file(file.string(), Errc::kModel, kMaxConfigBytes);
  const nlohmann::json j = parse_json(text, file.string());
  if (!j.is_object() || !j.contains("eos_token_id") || j["eos_token_id"].is_null()) return;
  const nlohmann::json& eos = j["eos_token_id"];
  const auto take = [&](const nlohmann::json& v) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
      throw Error(Errc::kModelBadConfig,
                  file.string() + ": eos_token_id must be a token id or a list of them");
    const auto id = int32_t(v.get<int64_t>());
    if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  };
  if (eos.is_array()) {
    for (const nlohmann::json& v : eos) take(v);
  } else {
    take(eos);
  }
}

}  // namespace

std::vector<int32_t> model_stop_tokens(const std::string& spec) {
  std::vector<int32_t> ids;
  std::error_code ec;
  if (!fs::is_directory(spec, ec)) return ids;  // a preset: random weights, no vocabulary
  add_eos_ids(fs::path(spec) / "config.json", ids);
  add_eos_ids(fs::path(spec) / "generation_config.json", ids);
  return ids;
}

GenerateSummary generate_continuations(const data::Corpus& prompts, const GenerateOptions& options,
                                       const Continuer& continuer, size_t chunk,
                                       data::ShardSetWriter& out,
                                       const std::function<void(uint64_t, uint64_t)>& progress) {
  GenerateSummary summary;
  std::vector<uint32_t> tokens;
  std::vector<uint8_t> counted;
  std::vector<std::vector<int32_t>> pending;  // prompts waiting for the continuer
  uint64_t done = 0, continued = 0;
  const auto flush = [&] {
    if (pending.empty()) return;
    const std::vector<std::vector<int32_t>> continuations =
        continuer(pending, continued - pending.size());
    for (size_t i = 0; i < pending.size(); ++i) {
      const std::vector<int32_t>& prompt = pending[i];
      const std::vector<int32_t>& continuation = continuations[i];
      tokens.assign(prompt.begin(), prompt.end());
      tokens.insert(tokens.end(), continuation.begin(), continuation.end());
      // The prompt is context only: the drafter trains on what the target generated.
      counted.assign(prompt.size(), 0);
      counted.resize(tokens.size(), 1);
      out.add_document(tokens, counted);
      ++summary.documents;
      summary.prompt_tokens += prompt.size();
      summary.generated_tokens += continuation.size();
      summary.stopped +=
          !continuation.empty() && std::find(options.stop_tokens.begin(), options.stop_tokens.end(),
                                             continuation.back()) != options.stop_tokens.end();
    }
    pending.clear();
  };
  for (uint32_t s = 0; s < prompts.shards().size(); ++s) {
    const data::ShardInfo& shard = prompts.shards()[s];
    for (size_t d = 0; d + 1 < shard.doc_offsets.size(); ++d) {
      ++done;
      if (shard.doc_offsets[d + 1] == shard.doc_offsets[d]) {
        ++summary.skipped;  // nothing to continue from
        continue;
      }
      if (continued++ < options.resume_after) continue;  // written before the interruption
      pending.push_back(read_document(prompts, s, d, options.prompt_tokens));
      if (pending.size() < chunk) continue;
      flush();
      if (progress && done < prompts.doc_count()) progress(done, prompts.doc_count());
    }
  }
  flush();
  if (progress) progress(done, prompts.doc_count());
  summary.shard_paths = out.finish().shard_paths;
  return summary;
}

GenerateSummary generate_continuations(TargetModel& target, const data::Corpus& prompts,
                                       const GenerateOptions& options, data::ShardSetWriter& out,
                                       const std::function<void(uint64_t, uint64_t)>& progress) {
  const Continuer one_by_one = [&](std::span<const std::vector<int32_t>> chunk, uint64_t first) {
    std::vector<std::vector<int32_t>> continuations;
    for (size_t i = 0; i < chunk.size(); ++i)
      continuations.push_back(
          options.sampling.greedy()
              ? greedy_decode(target, chunk[i], options.max_new_tokens, options.stop_tokens)
              : sample_decode(target, chunk[i], options.max_new_tokens,
                              PromptSampler(options.sampling, first + i), options.stop_tokens));
    return continuations;
  };
  return generate_continuations(prompts, options, one_by_one, 1, out, progress);
}

}  // namespace hsring::eval
