#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "common/contract.h"
#include "common/doc_offsets.h"

namespace hsring {

namespace {

std::vector<double> plain_frequencies(double theta, uint32_t head_dim) {
  std::vector<double> inv_freq(head_dim / 2);
  for (size_t i = 0; i < inv_freq.size(); ++i)
    inv_freq[i] = std::pow(theta, -double(2 * i) / double(head_dim));
  return inv_freq;
}

// Llama 3.1: wavelengths above original / low_freq_factor are slowed by `factor`, those
// below original / high_freq_factor kept, and the band between blended linearly in
// original / wavelength.
void apply_llama3(const RopeScaling& r, std::vector<double>& inv_freq) {
  const double low_wavelength = r.original_max_positions / r.low_freq_factor;
  const double high_wavelength = r.original_max_positions / r.high_freq_factor;
  for (double& f : inv_freq) {
    const double wavelength = 2 * std::numbers::pi / f;
    if (wavelength > low_wavelength) {
      f /= r.factor;
    } else if (!(wavelength < high_wavelength)) {
      const double smooth = (r.original_max_positions / wavelength - r.low_freq_factor) /
                            (r.high_freq_factor - r.low_freq_factor);
      f = (1 - smooth) * f / r.factor + smooth * f;
    }
  }
}

// YaRN ("NTK-by-parts"): dimensions that turn fewer than beta_slow times over the original
// context are interpolated (divided by factor), those turning more than beta_fast times
// kept, with a linear ramp over the dimension index between the two.
void apply_yarn(const RopeScaling& r, double theta, uint32_t head_dim,
                std::vector<double>& inv_freq) {
  const double dim = head_dim;
  const auto correction_dim = [&](double rotations) {
    return dim * std::log(r.original_max_positions / (rotations * 2 * std::numbers::pi)) /
           (2 * std::log(theta));
  };
  double low = correction_dim(r.beta_fast);
  double high = correction_dim(r.beta_slow);
  if (r.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;  // as transformers: no division by zero
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
    inv_freq[i] = inv_freq[i] / r.factor * ramp + inv_freq[i] * (1 - ramp);
  }
}

}  // namespace

const char* rope_type_name(RopeType type) {
  switch (type) {
    case RopeType::kDefault:
      return "default";
    case RopeType::kLinear:
      return "linear";
    case RopeType::kDynamic:
      return "dynamic";
    case RopeType::kYarn:
      return "yarn";
    case RopeType::kLlama3:
      return "llama3";
  }
  return "?";
}

std::string validate_rope(const RopeScaling& r) {
  const std::string type = rope_type_name(r.type);
  const auto finite_positive = [](double v) { return v > 0 && std::isfinite(v); };
  if (r.type == RopeType::kDefault) return "";
  if (!(r.factor >= 1) || !std::isfinite(r.factor))
    return "rope " + type + ": factor must be a finite number >= 1";
  if (!finite_positive(r.attention_factor))
    return "rope " + type + ": attention_factor must be positive";
  switch (r.type) {
    case RopeType::kDynamic:
      if (!finite_positive(r.max_positions))
        return "rope dynamic: max_position_embeddings must be positive";
      break;
    case RopeType::kLlama3:
      if (!finite_positive(r.original_max_positions))
        return "rope llama3: original_max_position_embeddings must be positive";
      if (!finite_positive(r.low_freq_factor) || !finite_positive(r.high_freq_factor) ||
          !(r.high_freq_factor > r.low_freq_factor))
        return "rope llama3: low_freq_factor and high_freq_factor must be positive, "
               "high above low";
      break;
    case RopeType::kYarn:
      if (!finite_positive(r.original_max_positions))
        return "rope yarn: original_max_position_embeddings must be positive";
      if (!finite_positive(r.beta_fast) || !finite_positive(r.beta_slow) ||
          r.beta_fast < r.beta_slow)
        return "rope yarn: beta_fast and beta_slow must be positive, fast >= slow";
      break;
    default:
      break;
  }
  return "";
}

double dynamic_rope_base(const RopeScaling& r, double theta, uint32_t head_dim, int64_t seq_len) {
  if (double(seq_len) <= r.max_positions) return theta;
  const double dim = head_dim;
  return theta *
         std::pow(r.factor * double(seq_len) / r.max_positions - (r.factor - 1), dim / (dim - 2));
}

std::vector<double> rope_inverse_frequencies(const RopeScaling& r, double theta, uint32_t head_dim,
                                             int64_t seq_len) {
  HSRING_REQUIRE(validate_rope(r).empty());
  if (r.type == RopeType::kDynamic)
    return plain_frequencies(dynamic_rope_base(r, theta, head_dim, seq_len), head_dim);
  std::vector<double> inv_freq = plain_frequencies(theta, head_dim);
  switch (r.type) {
    case RopeType::kLinear:
      for (double& f : inv_freq) f /= r.factor;
      break;
    case RopeType::kLlama3:
      apply_llama3(r, inv_freq);
      break;
    case RopeType::kYarn:
      apply_yarn(r, theta, head_dim, inv_freq);
      break;
    default:
      break;
  }
  return inv_freq;
}

std::vector<double> dynamic_rope_bases(const RopeScaling& r, double theta, uint32_t head_dim,
                                       std::span<const int32_t> positions,
                                       std::span<const int32_t> doc_offsets) {
  if (r.type != RopeType::kDynamic) return {};
  std::vector<double> bases(positions.size());
  for (size_t d = 0; d + 1 < doc_offsets.size(); ++d) {
    const auto begin = positions.begin() + doc_offsets[d];
    const auto end = positions.begin() + doc_offsets[d + 1];
    if (begin == end) continue;
    const double base =
        dynamic_rope_base(r, theta, head_dim, int64_t(*std::max_element(begin, end)) + 1);
    std::fill(bases.begin() + doc_offsets[d], bases.begin() + doc_offsets[d + 1], base);
  }
  return bases;
}

void rope_tables(const RopeScaling& r, double theta, uint32_t head_dim,
                 std::span<const int32_t> positions, std::span<const int32_t> doc_offsets,
                 float* cos, float* sin) {
  HSRING_REQUIRE(is_doc_partition(doc_offsets, positions.size()));
  const size_t half = head_dim / 2;
  const std::vector<double> bases = dynamic_rope_bases(r, theta, head_dim, positions, doc_offsets);
  std::vector<double> inv_freq = rope_inverse_frequencies(r, theta, head_dim, 0);
  double current_base = theta;
  for (size_t t = 0; t < positions.size(); ++t) {
    if (!bases.empty() && bases[t] != current_base) {
      current_base = bases[t];
      inv_freq = plain_frequencies(current_base, head_dim);
    }
    for (size_t i = 0; i < half; ++i) {
      const double angle = double(positions[t]) * inv_freq[i];
      cos[t * half + i] = float(std::cos(angle) * r.attention_factor);
      sin[t * half + i] = float(std::sin(angle) * r.attention_factor);
    }
  }
}

}  // namespace hsring
