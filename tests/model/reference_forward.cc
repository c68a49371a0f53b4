#include "reference_forward.h"

#include <cmath>

namespace hsring::test {

namespace {

using Vec = std::vector<double>;

Vec rms_norm(const Vec& x, const float* w, size_t n, size_t offset, double eps) {
  double ms = 0;
  for (size_t i = 0; i < n; ++i) ms += x[offset + i] * x[offset + i];
  ms /= double(n);
  Vec y(n);
  for (size_t i = 0; i < n; ++i) y[i] = x[offset + i] / std::sqrt(ms + eps) * w[i];
  return y;
}

// y = W x for W [out, in] (HF Linear layout).
Vec matvec(const std::vector<float>& w, const Vec& x, size_t out) {
  const size_t in = x.size();
  Vec y(out, 0.0);
  for (size_t o = 0; o < out; ++o)
    for (size_t i = 0; i < in; ++i) y[o] += double(w[o * in + i]) * x[i];
  return y;
}

// Rotates one head vector: pairs (i, i + d/2), angle = pos / theta^(2i/d).
void rope(double* v, size_t d, int32_t pos, double theta) {
  for (size_t i = 0; i < d / 2; ++i) {
    const double angle = pos / std::pow(theta, double(2 * i) / double(d));
    const double a = v[i];
    const double b = v[i + d / 2];
    v[i] = a * std::cos(angle) - b * std::sin(angle);
    v[i + d / 2] = a * std::sin(angle) + b * std::cos(angle);
  }
}

}  // namespace

ReferenceResult reference_forward(const ModelConfig& c, const ModelWeights& w,
                                  const std::vector<int32_t>& tokens,
                                  const std::vector<int32_t>& positions) {
  const size_t n = tokens.size();
  const size_t h = c.hidden_size;
  const size_t hd = c.head_dim;
  std::vector<Vec> x(n, Vec(h));
  for (size_t t = 0; t < n; ++t)
    for (size_t i = 0; i < h; ++i) x[t][i] = w.embed_tokens[size_t(tokens[t]) * h + i];

  ReferenceResult result;
  for (uint32_t layer = 0; layer < c.num_layers; ++layer) {
    const LayerWeights& lw = w.layers[layer];
    std::vector<Vec> q(n), k(n), v(n);
    for (size_t t = 0; t < n; ++t) {
      const Vec a = rms_norm(x[t], lw.input_norm.data(), h, 0, c.rms_norm_eps);
      q[t] = matvec(lw.q_proj, a, c.num_heads * hd);
      k[t] = matvec(lw.k_proj, a, c.num_kv_heads * hd);
      v[t] = matvec(lw.v_proj, a, c.num_kv_heads * hd);
      if (c.qkv_bias) {
        for (size_t i = 0; i < q[t].size(); ++i) q[t][i] += lw.q_bias[i];
        for (size_t i = 0; i < k[t].size(); ++i) k[t][i] += lw.k_bias[i];
        for (size_t i = 0; i < v[t].size(); ++i) v[t][i] += lw.v_bias[i];
      }
      for (uint32_t head = 0; head < c.num_heads; ++head) {
        if (c.qk_norm) {
          const Vec normed = rms_norm(q[t], lw.q_norm.data(), hd, head * hd, c.rms_norm_eps);
          std::copy(normed.begin(), normed.end(), q[t].begin() + long(head * hd));
        }
        rope(q[t].data() + head * hd, hd, positions[t], c.rope_theta);
      }
      for (uint32_t head = 0; head < c.num_kv_heads; ++head) {
        if (c.qk_norm) {
          const Vec normed = rms_norm(k[t], lw.k_norm.data(), hd, head * hd, c.rms_norm_eps);
          std::copy(normed.begin(), normed.end(), k[t].begin() + long(head * hd));
        }
        rope(k[t].data() + head * hd, hd, positions[t], c.rope_theta);
      }
    }
    const uint32_t per_kv = c.num_heads / c.num_kv_heads;
    for (size_t t = 0; t < n; ++t) {
      Vec attn(c.num_heads * hd, 0.0);
      for (uint32_t head = 0; head < c.num_heads; ++head) {
        const size_t kvh = head / per_kv;
        Vec score(t + 1);
        double best = -1e300;
        for (size_t j = 0; j <= t; ++j) {
          double s = 0;
          for (size_t i = 0; i < hd; ++i) s += q[t][head * hd + i] * k[j][kvh * hd + i];
          score[j] = s / std::sqrt(double(hd));
          best = std::max(best, score[j]);
        }
        double total = 0;
        for (size_t j = 0; j <= t; ++j) total += std::exp(score[j] - best);
        for (size_t j = 0; j <= t; ++j)
          for (size_t i = 0; i < hd; ++i)
            attn[head * hd + i] += std::exp(score[j] - best) / total * v[j][kvh * hd + i];
      }
      const Vec o = matvec(lw.o_proj, attn, h);
      for (size_t i = 0; i < h; ++i) x[t][i] += o[i];
      const Vec m = rms_norm(x[t], lw.post_attention_norm.data(), h, 0, c.rms_norm_eps);
      const Vec gate = matvec(lw.gate_proj, m, c.intermediate_size);
      const Vec up = matvec(lw.up_proj, m, c.intermediate_size);
      Vec act(c.intermediate_size);
      for (size_t i = 0; i < act.size(); ++i) act[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
      const Vec down = matvec(lw.down_proj, act, h);
      for (size_t i = 0; i < h; ++i) x[t][i] += down[i];
    }
    result.layer_outputs.push_back(x);
  }
  const std::vector<float>& head = c.tie_embeddings ? w.embed_tokens : w.lm_head;
  for (size_t t = 0; t < n; ++t)
    result.logits.push_back(
        matvec(head, rms_norm(x[t], w.final_norm.data(), h, 0, c.rms_norm_eps), c.vocab_size));
  return result;
}

}  // namespace hsring::test
