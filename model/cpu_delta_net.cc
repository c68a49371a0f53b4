#include "model/cpu_delta_net.h"

#include <cmath>
#include <vector>

#include "common/parallel.h"

namespace hsring {

namespace {

float silu(float x) { return x / (1.0f + std::exp(-x)); }

// torch's softplus: log(1 + e^x), and x itself above 20 where they agree in fp32.
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// x / sqrt(sum x^2 + 1e-6) over one head (transformers' l2norm, as in the FLA kernels).
void l2_normalise(float* x, size_t n) {
  double squares = 0;
  for (size_t i = 0; i < n; ++i) squares += double(x[i]) * x[i];
  const auto scale = float(1.0 / std::sqrt(squares + 1e-6));
  for (size_t i = 0; i < n; ++i) x[i] *= scale;
}

}  // namespace

void causal_conv_silu(const float* x, size_t channels, const float* w, size_t kernel,
                      std::span<const int32_t> doc_offsets, float* y) {
  for (size_t d = 0; d + 1 < doc_offsets.size(); ++d) {
    const auto begin = size_t(doc_offsets[d]);
    for (auto t = begin; t < size_t(doc_offsets[d + 1]); ++t) {
      for (size_t c = 0; c < channels; ++c) {
        float sum = 0;
        // Tap j reads token t - (kernel - 1) + j, if it is in this document.
        for (size_t j = 0; j < kernel; ++j) {
          if (t + j + 1 < begin + kernel) continue;
          sum += w[c * kernel + j] * x[(t + j + 1 - kernel) * channels + c];
        }
        y[t * channels + c] = silu(sum);
      }
    }
  }
}

void delta_gates(float* a, float* b, size_t rows, size_t v_heads, const float* a_log,
                 const float* dt_bias) {
  for (size_t r = 0; r < rows; ++r) {
    for (size_t h = 0; h < v_heads; ++h) {
      float& g = a[r * v_heads + h];
      g = -std::exp(a_log[h]) * softplus(g + dt_bias[h]);
      float& beta = b[r * v_heads + h];
      beta = 1.0f / (1.0f + std::exp(-beta));
    }
  }
}

void gated_delta_rule(float* qkv, const float* g, const float* beta, size_t rows,
                      const DeltaNetShape& s, std::span<const int32_t> doc_offsets, float* out,
                      uint32_t threads) {
  const size_t dk = s.qk_head_dim;
  const size_t dv = s.v_head_dim;
  const size_t stride = s.conv_dim();
  const float q_scale = 1.0f / std::sqrt(float(dk));
  for (size_t r = 0; r < rows; ++r) {
    float* row = qkv + r * stride;
    for (size_t h = 0; h < 2 * s.qk_heads; ++h) l2_normalise(row + h * dk, dk);
    for (size_t i = 0; i < s.qk_dim(); ++i) row[i] *= q_scale;
  }
  const size_t group = s.v_heads / s.qk_heads;
  // Value heads are independent: each thread runs whole heads through every document.
  parallel_for(s.v_heads, threads, 1, [&](size_t first, size_t last) {
    std::vector<float> state(dk * dv), delta(dv);
    for (size_t h = first; h < last; ++h) {
      const size_t kh = h / group;
      for (size_t d = 0; d + 1 < doc_offsets.size(); ++d) {
        std::fill(state.begin(), state.end(), 0.0f);  // a document starts from nothing
        for (auto t = size_t(doc_offsets[d]); t < size_t(doc_offsets[d + 1]); ++t) {
          const float* q = qkv + t * stride + kh * dk;
          const float* k = q + s.qk_dim();
          const float* v = qkv + t * stride + 2 * s.qk_dim() + h * dv;
          const float decay = std::exp(g[t * s.v_heads + h]);
          const float b = beta[t * s.v_heads + h];
          for (float& x : state) x *= decay;
          // delta = beta (v - S^T k), then S += k delta^T.
          for (size_t j = 0; j < dv; ++j) {
            float memory = 0;
            for (size_t i = 0; i < dk; ++i) memory += state[i * dv + j] * k[i];
            delta[j] = (v[j] - memory) * b;
          }
          for (size_t i = 0; i < dk; ++i)
            for (size_t j = 0; j < dv; ++j) state[i * dv + j] += k[i] * delta[j];
          float* o = out + t * s.v_dim() + h * dv;
          for (size_t j = 0; j < dv; ++j) {
            float sum = 0;
            for (size_t i = 0; i < dk; ++i) sum += state[i * dv + j] * q[i];
            o[j] = sum;
          }
        }
      }
    }
  });
}

void gated_rms_norm(const float* x, const float* gate, const float* weight, size_t rows, size_t dim,
                    double eps, float* y) {
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const float* zr = gate + r * dim;
    float* yr = y + r * dim;
    double squares = 0;
    for (size_t i = 0; i < dim; ++i) squares += double(xr[i]) * xr[i];
    const auto scale = float(1.0 / std::sqrt(squares / double(dim) + eps));
    for (size_t i = 0; i < dim; ++i) yr[i] = weight[i] * (xr[i] * scale) * silu(zr[i]);
  }
}

}  // namespace hsring
