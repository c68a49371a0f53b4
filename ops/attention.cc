#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "common/contract.h"
#include "common/doc_offsets.h"
#include "common/parallel.h"
#include "ops/dot.h"

namespace hsring::ops {

namespace {

// Each row's document [start, end), and the longest document.
struct DocBounds {
  std::vector<size_t> start, end;
  size_t longest = 0;
};

DocBounds doc_bounds(std::span<const int32_t> offsets, size_t rows) {
  DocBounds b;
  b.start.resize(rows);
  b.end.resize(rows);
  for (size_t d = 0; d + 1 < offsets.size(); ++d) {
    const auto s = size_t(offsets[d]);
    const auto e = size_t(offsets[d + 1]);
    for (size_t t = s; t < e; ++t) {
      b.start[t] = s;
      b.end[t] = e;
    }
    b.longest = std::max(b.longest, e - s);
  }
  return b;
}

size_t window_of(const AttentionShape& shape) { return shape.window ? shape.window : shape.rows; }

// The first key token `t` attends to.
inline size_t first_key(size_t t, size_t doc_start, size_t window) {
  return t + 1 >= window ? std::max(doc_start, t + 1 - window) : doc_start;
}

// One past the last query token that attends to key `j`.
inline size_t last_query_end(size_t j, size_t doc_end, size_t window) {
  return doc_end - j <= window ? doc_end : j + window;
}

// The score sum of products in Acc: fp32 lanes or double lanes (ops/dot.h).
template <class Acc, class Real>
Acc score_dot(const Real* a, const Real* b, size_t n) {
  if constexpr (std::is_same_v<Acc, float>)
    return dot(a, b, n);
  else
    return dot_double(a, b, n);
}

// acc[i] += p * x[i] in Acc.
template <class Acc, class Real>
void add_scaled(Acc p, const Real* x, Acc* acc, size_t n) {
  if constexpr (std::is_same_v<Acc, double>)
    axpy_double(p, x, acc, n);
  else
    axpy_float(p, x, acc, n);
}

template <class Acc, class Real>
void forward(const Real* q, const Real* k, const Real* v, const AttentionShape& shape,
             std::span<const int32_t> doc_offsets, Real* out, double* lse, uint32_t threads) {
  const size_t rows = shape.rows, heads = shape.heads, hd = shape.head_dim;
  const size_t window = window_of(shape);
  const DocBounds bounds = doc_bounds(doc_offsets, rows);
  const size_t group = heads / shape.kv_heads;
  const size_t q_stride = heads * hd;
  const size_t kv_stride = shape.kv_heads * hd;
  const Acc scale = Acc(1) / std::sqrt(Acc(hd));
  const size_t span = std::min(window, bounds.longest);
  parallel_for(
      rows, threads_for(rows * span * q_stride, threads), 1, [&](size_t begin, size_t end) {
        std::vector<Acc> scores(span);
        std::vector<Acc> acc(hd);
        for (size_t t = begin; t < end; ++t) {
          const size_t lo = first_key(t, bounds.start[t], window);
          const size_t n = t - lo + 1;
          for (size_t h = 0; h < heads; ++h) {
            const Real* qh = q + t * q_stride + h * hd;
            const size_t kv_offset = (h / group) * hd;
            Acc max_score = -std::numeric_limits<Acc>::infinity();
            for (size_t j = 0; j < n; ++j) {
              scores[j] = score_dot<Acc>(qh, k + (lo + j) * kv_stride + kv_offset, hd) * scale;
              max_score = std::max(max_score, scores[j]);
            }
            double total = 0;
            std::fill(acc.begin(), acc.end(), Acc(0));
            for (size_t j = 0; j < n; ++j) {
              const Acc p = std::exp(scores[j] - max_score);
              total += p;
              add_scaled(p, v + (lo + j) * kv_stride + kv_offset, acc.data(), hd);
            }
            // fp32 scales by the rounded reciprocal, double divides: each the rounding its
            // callers were checked with.
            Real* o = out + t * q_stride + h * hd;
            if constexpr (std::is_same_v<Acc, float>) {
              const auto inv = float(1.0 / total);
              for (size_t i = 0; i < hd; ++i) o[i] = Real(acc[i] * inv);
            } else {
              for (size_t i = 0; i < hd; ++i) o[i] = Real(acc[i] / total);
            }
            if (lse) lse[t * heads + h] = double(max_score) + std::log(total);
          }
        }
      });
}

}  // namespace

template <class Real>
void attention_forward(const Real* q, const Real* k, const Real* v, const AttentionShape& shape,
                       std::span<const int32_t> doc_offsets, Real* out, double* lse, Sums sums,
                       uint32_t threads) {
  HSRING_REQUIRE(is_doc_partition(doc_offsets, shape.rows) && shape.kv_heads > 0 &&
                 shape.heads % shape.kv_heads == 0);
  if constexpr (std::is_same_v<Real, float>) {
    if (sums == Sums::kFloat) return forward<float>(q, k, v, shape, doc_offsets, out, lse, threads);
  }
  HSRING_REQUIRE(sums == Sums::kDouble);
  forward<double>(q, k, v, shape, doc_offsets, out, lse, threads);
}

template <class Real>
void attention_backward(const Real* q, const Real* k, const Real* v, const Real* out,
                        const Real* dout, const double* lse, const AttentionShape& shape,
                        std::span<const int32_t> doc_offsets, Real* dq, Real* dk, Real* dv,
                        uint32_t threads) {
  // With p_j = softmax(s)_j, s_j = scale q.k_j, o = sum_j p_j v_j:
  //   dv_j += p_j do,  ds_j = p_j (do.v_j - do.o),  dq += scale ds_j k_j,  dk_j += scale ds_j q.
  const size_t rows = shape.rows, heads = shape.heads, hd = shape.head_dim;
  const size_t window = window_of(shape);
  const DocBounds bounds = doc_bounds(doc_offsets, rows);
  const size_t group = heads / shape.kv_heads;
  const size_t q_stride = heads * hd;
  const size_t kv_stride = shape.kv_heads * hd;
  const double scale = 1.0 / std::sqrt(double(hd));
  const size_t span = std::min(window, bounds.longest);
  const uint32_t use = threads_for(rows * span * q_stride * 2, threads);

  // delta[t, h] = do . o: the softmax Jacobian's correction term of each query.
  std::vector<double> delta(rows * heads);
  for (size_t i = 0; i < rows * heads; ++i) delta[i] = dot_double(dout + i * hd, out + i * hd, hd);

  // The probability of query (t, h) on key row j, recomputed exactly as the forward did.
  const auto prob = [&](size_t t, size_t h, size_t j) {
    const double s =
        dot_double(q + t * q_stride + h * hd, k + j * kv_stride + (h / group) * hd, hd);
    return std::exp(s * scale - lse[t * heads + h]);
  };

  // dq: one query row at a time.
  parallel_for(rows, use, 1, [&](size_t begin, size_t end) {
    std::vector<double> acc(hd);
    for (size_t t = begin; t < end; ++t) {
      const size_t lo = first_key(t, bounds.start[t], window);
      for (size_t h = 0; h < heads; ++h) {
        const Real* doh = dout + t * q_stride + h * hd;
        const size_t kv_offset = (h / group) * hd;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (size_t j = lo; j <= t; ++j) {
          const double p = prob(t, h, j);
          const double ds =
              p * (dot_double(doh, v + j * kv_stride + kv_offset, hd) - delta[t * heads + h]);
          axpy_double(ds, k + j * kv_stride + kv_offset, acc.data(), hd);
        }
        Real* dqh = dq + t * q_stride + h * hd;
        for (size_t i = 0; i < hd; ++i) dqh[i] = Real(acc[i] * scale);
      }
    }
  });

  // dk, dv: one key row at a time, over the queries that see it (in order t, then head).
  parallel_for(rows, use, 1, [&](size_t begin, size_t end) {
    std::vector<double> acc_k(hd), acc_v(hd);
    for (size_t j = begin; j < end; ++j) {
      const size_t t_end = last_query_end(j, bounds.end[j], window);
      for (size_t g = 0; g < shape.kv_heads; ++g) {
        const Real* vj = v + j * kv_stride + g * hd;
        std::fill(acc_k.begin(), acc_k.end(), 0.0);
        std::fill(acc_v.begin(), acc_v.end(), 0.0);
        for (size_t t = j; t < t_end; ++t) {
          for (size_t h = g * group; h < (g + 1) * group; ++h) {
            const Real* doh = dout + t * q_stride + h * hd;
            const double p = prob(t, h, j);
            const double ds = p * (dot_double(doh, vj, hd) - delta[t * heads + h]);
            axpy_double(ds, q + t * q_stride + h * hd, acc_k.data(), hd);
            axpy_double(p, doh, acc_v.data(), hd);
          }
        }
        Real* dkj = dk + j * kv_stride + g * hd;
        Real* dvj = dv + j * kv_stride + g * hd;
        for (size_t i = 0; i < hd; ++i) {
          dkj[i] = Real(acc_k[i] * scale);
          dvj[i] = Real(acc_v[i]);
        }
      }
    }
  });
}

#define HSRING_OPS_ATTENTION(Real)                                                              \
  template void attention_forward(const Real*, const Real*, const Real*, const AttentionShape&, \
                                  std::span<const int32_t>, Real*, double*, Sums, uint32_t);    \
  template void attention_backward(const Real*, const Real*, const Real*, const Real*,          \
                                   const Real*, const double*, const AttentionShape&,           \
                                   std::span<const int32_t>, Real*, Real*, Real*, uint32_t);
HSRING_OPS_ATTENTION(float)
HSRING_OPS_ATTENTION(double)
#undef HSRING_OPS_ATTENTION

}  // namespace hsring::ops
