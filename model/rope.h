// RoPE's frequency rules: plain RoPE and the scaled variants of Hugging Face's `rope_type`
// (linear, dynamic NTK, YaRN, Llama 3), as transformers computes them, and the per-token
// cos / sin tables a packed batch needs.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace hsring {

enum class RopeType { kDefault, kLinear, kDynamic, kYarn, kLlama3 };

// The rope_type string HF uses ("default", "linear", "dynamic", "yarn", "llama3").
const char* rope_type_name(RopeType type);

// A RoPE rule with every default resolved at parse time, so the forward never looks at
// config.json again. Fields a type does not use keep their defaults.
struct RopeScaling {
  RopeType type = RopeType::kDefault;
  double factor = 1.0;  // linear, dynamic, yarn, llama3
  // llama3, yarn: the pretraining context (rope_parameters.original_max_position_embeddings,
  // else max_position_embeddings, as HF standardises it).
  double original_max_positions = 0;
  // dynamic: max_position_embeddings, the length above which the base grows.
  double max_positions = 0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  double beta_fast = 32.0, beta_slow = 1.0;              // yarn
  bool truncate = true;                                  // yarn: floor / ceil the ramp bounds
  // Multiplies cos and sin (HF's attention_scaling): YaRN's mscale, 1 for the others.
  double attention_factor = 1.0;
};

// "" when the rule can be applied, else what is wrong (factor < 1, llama3 factors equal...).
std::string validate_rope(const RopeScaling& rope);

// The inverse frequencies [head_dim / 2] in double for a document whose positions reach
// seq_len - 1. Only dynamic NTK reads seq_len: as transformers, it keeps plain RoPE up to
// max_positions and grows the base above it. REQUIRES: validate_rope(rope).empty().
std::vector<double> rope_inverse_frequencies(const RopeScaling& rope, double theta,
                                             uint32_t head_dim, int64_t seq_len);

// Dynamic NTK's base for a document of seq_len positions (theta up to max_positions):
// theta * (factor * seq_len / max_positions - (factor - 1))^(d / (d - 2)).
double dynamic_rope_base(const RopeScaling& rope, double theta, uint32_t head_dim, int64_t seq_len);

// Per token, the base its document's dynamic NTK rule uses (seq_len = the largest position
// of the document + 1, as transformers computes it when it runs that document alone).
// Empty unless rope.type is kDynamic.
std::vector<double> dynamic_rope_bases(const RopeScaling& rope, double theta, uint32_t head_dim,
                                       std::span<const int32_t> positions,
                                       std::span<const int32_t> doc_offsets);

// cos and sin [rows, head_dim / 2] of position * inv_freq_i for every token of a packed
// batch, in double, times rope.attention_factor, rounded once to float.
// REQUIRES: doc_offsets is 0 = o_0 < ... < o_D = positions.size().
void rope_tables(const RopeScaling& rope, double theta, uint32_t head_dim,
                 std::span<const int32_t> positions, std::span<const int32_t> doc_offsets,
                 float* cos, float* sin);

}  // namespace hsring
