#include "model/cpu_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/contract.h"
#include "common/doc_offsets.h"
#include "common/parallel.h"

namespace hsring::cpu {

namespace {

// Below this many multiply-adds a region runs on the caller's thread: starting threads
// would cost more than it saves.
constexpr size_t kMinParallelWork = size_t(1) << 18;

uint32_t threads_for(size_t work, uint32_t threads) {
  return work < kMinParallelWork ? 1u : threads;
}

// Eight float lanes as two 4-wide vectors (SSE / NEON width: no ABI or -march needs).
// GCC/Clang vector arithmetic is lane-wise IEEE, so a lane's sum is the scalar one.
typedef float Vec4 __attribute__((vector_size(16)));

inline Vec4 load4(const float* p) {
  Vec4 v;
  std::memcpy(&v, p, sizeof(v));  // unaligned load
  return v;
}

// The fixed reduction tree of the eight lanes, then the tail in order.
inline float finish(Vec4 lo, Vec4 hi, const float* a, const float* b, size_t from, size_t n) {
  float sum = ((lo[0] + lo[1]) + (lo[2] + lo[3])) + ((hi[0] + hi[1]) + (hi[2] + hi[3]));
  for (size_t i = from; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// Four dot products sharing x: its loads are reused and 8 independent accumulators hide
// the add latency. Each row's arithmetic is exactly dot()'s, so grouping changes nothing.
void dot4(const float* x, const float* const w[4], size_t n, float out[4]) {
  Vec4 lo0 = {}, hi0 = {}, lo1 = {}, hi1 = {}, lo2 = {}, hi2 = {}, lo3 = {}, hi3 = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const Vec4 xl = load4(x + i);
    const Vec4 xh = load4(x + i + 4);
    lo0 += xl * load4(w[0] + i);
    hi0 += xh * load4(w[0] + i + 4);
    lo1 += xl * load4(w[1] + i);
    hi1 += xh * load4(w[1] + i + 4);
    lo2 += xl * load4(w[2] + i);
    hi2 += xh * load4(w[2] + i + 4);
    lo3 += xl * load4(w[3] + i);
    hi3 += xh * load4(w[3] + i + 4);
  }
  out[0] = finish(lo0, hi0, x, w[0], i, n);
  out[1] = finish(lo1, hi1, x, w[1], i, n);
  out[2] = finish(lo2, hi2, x, w[2], i, n);
  out[3] = finish(lo3, hi3, x, w[3], i, n);
}

}  // namespace

float dot(const float* a, const float* b, size_t n) {
  Vec4 lo = {}, hi = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    lo += load4(a + i) * load4(b + i);
    hi += load4(a + i + 4) * load4(b + i + 4);
  }
  return finish(lo, hi, a, b, i, n);
}

void linear(const float* x, size_t rows, size_t in, const float* w, size_t out, float* y,
            uint32_t threads) {
  // A block of 16 weight rows (256 KiB at in = 4096) stays in L2 while all rows pass.
  constexpr size_t kBlock = 16;
  parallel_for(out, threads_for(rows * in * out, threads), kBlock, [&](size_t begin, size_t end) {
    for (size_t o0 = begin; o0 < end; o0 += kBlock) {
      const size_t o1 = std::min(end, o0 + kBlock);
      for (size_t r = 0; r < rows; ++r) {
        const float* xr = x + r * in;
        float* yr = y + r * out;
        for (size_t o = o0; o < o1; o += 4) {
          // Past the block's end, repeat its last row; those results are dropped.
          const float* rows4[4];
          for (size_t g = 0; g < 4; ++g) rows4[g] = w + std::min(o + g, o1 - 1) * in;
          float result[4];
          dot4(xr, rows4, in, result);
          for (size_t g = 0; g < 4 && o + g < o1; ++g) yr[o + g] = result[g];
        }
      }
    }
  });
}

void rms_norm(const float* x, const float* weight, size_t rows, size_t dim, double eps, float* y) {
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    double squares = 0;
    for (size_t i = 0; i < dim; ++i) squares += double(xr[i]) * xr[i];
    const auto scale = float(1.0 / std::sqrt(squares / double(dim) + eps));
    for (size_t i = 0; i < dim; ++i) yr[i] = (xr[i] * scale) * weight[i];
  }
}

void apply_rope(float* x, size_t rows, size_t heads, size_t head_dim, const float* cos,
                const float* sin, size_t rotary_dim) {
  const size_t half = (rotary_dim ? rotary_dim : head_dim) / 2;
  for (size_t r = 0; r < rows; ++r) {
    const float* c = cos + r * half;
    const float* s = sin + r * half;
    for (size_t h = 0; h < heads; ++h) {
      float* v = x + (r * heads + h) * head_dim;
      for (size_t i = 0; i < half; ++i) {
        const float a = v[i];
        const float b = v[i + half];
        v[i] = a * c[i] - b * s[i];
        v[i + half] = b * c[i] + a * s[i];
      }
    }
  }
}

void add_bias(float* x, size_t rows, size_t dim, const float* bias) {
  for (size_t r = 0; r < rows; ++r)
    for (size_t i = 0; i < dim; ++i) x[r * dim + i] += bias[i];
}

void swiglu(const float* gate, const float* up, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void packed_causal_attention(const float* q, const float* k, const float* v, size_t rows,
                             size_t heads, size_t kv_heads, size_t head_dim,
                             std::span<const int32_t> doc_offsets, float* out, uint32_t threads) {
  HSRING_REQUIRE(is_doc_partition(doc_offsets, rows) && kv_heads > 0 && heads % kv_heads == 0);
  // Where each token's document starts, so any token range can be processed on its own.
  std::vector<size_t> doc_start(rows);
  size_t longest = 0;
  for (size_t d = 0; d + 1 < doc_offsets.size(); ++d) {
    for (auto t = size_t(doc_offsets[d]); t < size_t(doc_offsets[d + 1]); ++t)
      doc_start[t] = size_t(doc_offsets[d]);
    longest = std::max(longest, size_t(doc_offsets[d + 1] - doc_offsets[d]));
  }
  const size_t group = heads / kv_heads;
  const size_t q_stride = heads * head_dim;
  const size_t kv_stride = kv_heads * head_dim;
  const float scale = 1.0f / std::sqrt(float(head_dim));
  const size_t work = rows * longest * q_stride;
  parallel_for(rows, threads_for(work, threads), 1, [&](size_t begin, size_t end) {
    std::vector<float> scores(longest);
    std::vector<float> acc(head_dim);
    for (size_t t = begin; t < end; ++t) {
      const size_t s = doc_start[t];
      const size_t n = t - s + 1;
      for (size_t h = 0; h < heads; ++h) {
        const float* qh = q + t * q_stride + h * head_dim;
        const size_t kvh = h / group;
        float max_score = -INFINITY;
        for (size_t j = 0; j < n; ++j) {
          scores[j] = dot(qh, k + (s + j) * kv_stride + kvh * head_dim, head_dim) * scale;
          max_score = std::max(max_score, scores[j]);
        }
        double total = 0;
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (size_t j = 0; j < n; ++j) {
          const float p = std::exp(scores[j] - max_score);
          total += p;
          const float* vj = v + (s + j) * kv_stride + kvh * head_dim;
          for (size_t i = 0; i < head_dim; ++i) acc[i] += p * vj[i];
        }
        const auto inv = float(1.0 / total);
        float* o = out + t * q_stride + h * head_dim;
        for (size_t i = 0; i < head_dim; ++i) o[i] = acc[i] * inv;
      }
    }
  });
}

int32_t argmax(const float* x, size_t n) {
  int32_t best = 0;
  float best_value = -INFINITY;
  bool found = false;
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) continue;
    if (!found || x[i] > best_value) {
      best = int32_t(i);
      best_value = x[i];
      found = true;
    }
  }
  return best;
}

}  // namespace hsring::cpu
