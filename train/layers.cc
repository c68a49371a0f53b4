#include "train/layers.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/contract.h"
#include "common/doc_offsets.h"
#include "model/cpu_kernels.h"
#include "common/parallel.h"

namespace hsring::train {

namespace {

// Below this many multiply-adds a call runs on the caller's thread: starting threads would
// cost more than it saves.
constexpr size_t kMinParallelWork = size_t(1) << 16;

uint32_t threads_for(size_t work, uint32_t threads) {
  return work < kMinParallelWork ? 1u : std::max(1u, threads);
}

// Two double lanes (SSE2 / NEON width, no -march needed). Vector arithmetic is lane-wise
// IEEE, so a lane computes exactly what the scalar code would.
typedef double Vec2d __attribute__((vector_size(16)));
typedef float Vec4f __attribute__((vector_size(16)));
typedef double Vec4d __attribute__((vector_size(32)));

// Four consecutive values widened to double, as two 2-lane halves.
struct Four {
  Vec2d lo, hi;
};

inline Four load4(const float* p) {
  Vec4f v;
  std::memcpy(&v, p, sizeof(v));                      // unaligned load
  const Vec4d d = __builtin_convertvector(v, Vec4d);  // cvtps2pd on x86
  return {Vec2d{d[0], d[1]}, Vec2d{d[2], d[3]}};
}
inline Four load4(const double* p) {
  Four f;
  std::memcpy(&f.lo, p, sizeof(f.lo));
  std::memcpy(&f.hi, p + 2, sizeof(f.hi));
  return f;
}

inline double sum_lanes(Vec2d lo, Vec2d hi) { return (lo[0] + lo[1]) + (hi[0] + hi[1]); }

// Sum of a[i] * b[i] in double: eight lanes, a fixed reduction tree, then the tail in order.
template <class Real>
double dot(const Real* a, const Real* b, size_t n) {
  Vec2d s0 = {}, s1 = {}, s2 = {}, s3 = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const Four a0 = load4(a + i), b0 = load4(b + i);
    const Four a1 = load4(a + i + 4), b1 = load4(b + i + 4);
    s0 += a0.lo * b0.lo;
    s1 += a0.hi * b0.hi;
    s2 += a1.lo * b1.lo;
    s3 += a1.hi * b1.hi;
  }
  double sum = sum_lanes(s0, s1) + sum_lanes(s2, s3);
  for (; i < n; ++i) sum += double(a[i]) * double(b[i]);
  return sum;
}

// out[g] = sum_p a[p] * b[g][p] for four rows b[g] sharing one row a: a is widened once for
// all four, and eight independent accumulators hide the add latency. Each output has four
// lanes, reduced in a fixed tree, then the tail in order: the same arithmetic for every
// output, whichever group it is computed in.
template <class Real>
void dot1x4(const Real* a, const Real* const b[4], size_t k, double out[4]) {
  Vec2d lo0 = {}, hi0 = {}, lo1 = {}, hi1 = {}, lo2 = {}, hi2 = {}, lo3 = {}, hi3 = {};
  size_t p = 0;
  for (; p + 4 <= k; p += 4) {
    const Four av = load4(a + p);
    const Four b0 = load4(b[0] + p);
    lo0 += av.lo * b0.lo;
    hi0 += av.hi * b0.hi;
    const Four b1 = load4(b[1] + p);
    lo1 += av.lo * b1.lo;
    hi1 += av.hi * b1.hi;
    const Four b2 = load4(b[2] + p);
    lo2 += av.lo * b2.lo;
    hi2 += av.hi * b2.hi;
    const Four b3 = load4(b[3] + p);
    lo3 += av.lo * b3.lo;
    hi3 += av.hi * b3.hi;
  }
  out[0] = sum_lanes(lo0, hi0);
  out[1] = sum_lanes(lo1, hi1);
  out[2] = sum_lanes(lo2, hi2);
  out[3] = sum_lanes(lo3, hi3);
  for (; p < k; ++p)
    for (size_t g = 0; g < 4; ++g) out[g] += double(a[p]) * double(b[g][p]);
}

// acc[i] += a * x[i]: each element on its own, so vector width changes no bit.
template <class Real>
void axpy(double a, const Real* x, double* acc, size_t n) {
  const Vec2d av = {a, a};
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const Four xv = load4(x + i);
    Vec2d lo, hi;
    std::memcpy(&lo, acc + i, sizeof(lo));
    std::memcpy(&hi, acc + i + 2, sizeof(hi));
    lo += av * xv.lo;
    hi += av * xv.hi;
    std::memcpy(acc + i, &lo, sizeof(lo));
    std::memcpy(acc + i + 2, &hi, sizeof(hi));
  }
  for (; i < n; ++i) acc[i] += a * double(x[i]);
}

// c[i, j] (+)= sum_p a[i, p] * b[j, p]: a [m, k], b [n, k], c [m, n], every element by
// dot1x4. Blocks of 16 rows of b stay in cache while the rows of a pass over them.
template <class Real>
void matmul_nt(const Real* a, size_t m, const Real* b, size_t n, size_t k, Real* c, bool accumulate,
               uint32_t threads) {
  constexpr size_t kBlock = 16;
  parallel_for(m, threads_for(m * n * k, threads), 4, [&](size_t begin, size_t end) {
    for (size_t j0 = 0; j0 < n; j0 += kBlock) {
      const size_t j1 = std::min(n, j0 + kBlock);
      for (size_t i = begin; i < end; ++i) {
        const Real* ai = a + i * k;
        Real* ci = c + i * n;
        for (size_t j = j0; j < j1; j += 4) {
          // Past the block's end, repeat its last row; those results are dropped.
          const Real* rows[4];
          for (size_t g = 0; g < 4; ++g) rows[g] = b + std::min(j + g, j1 - 1) * k;
          double result[4];
          dot1x4(ai, rows, k, result);
          for (size_t g = 0; g < 4 && j + g < j1; ++g)
            ci[j + g] = accumulate ? Real(double(ci[j + g]) + result[g]) : Real(result[g]);
        }
      }
    }
  });
}

// x [rows, cols] -> [cols, rows].
template <class Real>
std::vector<Real> transposed(const Real* x, size_t rows, size_t cols) {
  std::vector<Real> t(rows * cols);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) t[c * rows + r] = x[r * cols + c];
  return t;
}

template <class Real>
void store_row(const double* acc, size_t n, Real* dst, bool accumulate) {
  if (accumulate) {
    for (size_t i = 0; i < n; ++i) dst[i] = Real(double(dst[i]) + acc[i]);
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = Real(acc[i]);
  }
}

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

// The first key token `t` attends to.
inline size_t first_key(size_t t, size_t doc_start, size_t window) {
  return t + 1 >= window ? std::max(doc_start, t + 1 - window) : doc_start;
}

// One past the last query token that attends to key `j`.
inline size_t last_query_end(size_t j, size_t doc_end, size_t window) {
  return doc_end - j <= window ? doc_end : j + window;
}

template <class Real>
size_t argmax(const Real* x, size_t n) {
  size_t best = 0;
  bool found = false;
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) continue;
    if (!found || x[i] > x[best]) {
      best = i;
      found = true;
    }
  }
  return best;
}

}  // namespace

template <class Real>
void linear_forward(const Real* x, size_t rows, size_t in, const Real* w, size_t out, Real* y,
                    uint32_t threads) {
  matmul_nt(x, rows, w, out, in, y, false, threads);
}

template <class Real>
void linear_backward_input(const Real* dy, size_t rows, size_t out, const Real* w, size_t in,
                           Real* dx, bool accumulate, uint32_t threads) {
  // Rows of w scaled into double accumulators, four rows of dx per pass over w: no
  // transposed copy of w (the LM head's is as large as the vocabulary).
  constexpr size_t kGroup = 4;
  parallel_for(rows, threads_for(rows * in * out, threads), kGroup, [&](size_t begin, size_t end) {
    std::vector<double> acc(kGroup * in);
    for (size_t r0 = begin; r0 < end; r0 += kGroup) {
      const size_t n = std::min(kGroup, end - r0);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (size_t o = 0; o < out; ++o)
        for (size_t g = 0; g < n; ++g)
          axpy(double(dy[(r0 + g) * out + o]), w + o * in, acc.data() + g * in, in);
      for (size_t g = 0; g < n; ++g)
        store_row(acc.data() + g * in, in, dx + (r0 + g) * in, accumulate);
    }
  });
}

template <class Real>
void linear_backward_weight(const Real* dy, size_t rows, size_t out, const Real* x, size_t in,
                            Real* dw, uint32_t threads) {
  // dw = dy^T x as dot products over rows: transposed copies of dy and x (activation-sized).
  const std::vector<Real> dy_t = transposed(dy, rows, out);
  const std::vector<Real> x_t = transposed(x, rows, in);
  matmul_nt(dy_t.data(), out, x_t.data(), in, rows, dw, true, threads);
}

template <class Real>
void rms_norm_forward(const Real* x, const Real* weight, size_t rows, size_t dim, double eps,
                      Real* y) {
  for (size_t r = 0; r < rows; ++r) {
    const Real* xr = x + r * dim;
    Real* yr = y + r * dim;
    const double scale = 1.0 / std::sqrt(dot(xr, xr, dim) / double(dim) + eps);
    for (size_t i = 0; i < dim; ++i) yr[i] = Real(double(xr[i]) * scale * double(weight[i]));
  }
}

template <class Real>
void rms_norm_backward(const Real* x, const Real* weight, const Real* dy, size_t rows, size_t dim,
                       double eps, Real* dx, bool accumulate, Real* dweight) {
  // With s = 1 / rms(x) and xhat = x s:  y_i = w_i xhat_i,
  //   dx_j = s (w_j dy_j - xhat_j * sum_i(w_i dy_i xhat_i) / dim),  dw_i += dy_i xhat_i.
  std::vector<double> dweight_acc(dim, 0.0);
  for (size_t r = 0; r < rows; ++r) {
    const Real* xr = x + r * dim;
    const Real* dyr = dy + r * dim;
    Real* dxr = dx + r * dim;
    const double s = 1.0 / std::sqrt(dot(xr, xr, dim) / double(dim) + eps);
    double projection = 0;
    for (size_t i = 0; i < dim; ++i)
      projection += double(weight[i]) * double(dyr[i]) * (double(xr[i]) * s);
    projection /= double(dim);
    for (size_t i = 0; i < dim; ++i) {
      const double xhat = double(xr[i]) * s;
      dweight_acc[i] += double(dyr[i]) * xhat;
      const double d = s * (double(weight[i]) * double(dyr[i]) - xhat * projection);
      dxr[i] = accumulate ? Real(double(dxr[i]) + d) : Real(d);
    }
  }
  for (size_t i = 0; i < dim; ++i) dweight[i] = Real(double(dweight[i]) + dweight_acc[i]);
}

template <class Real>
void rope_table(std::span<const int32_t> positions, size_t head_dim, double theta, Real* cos,
                Real* sin) {
  cpu::rope_angles(positions, head_dim, theta, cos, sin);  // the target's rule, in Real
}

namespace {

// Rotates each pair (i, i + half) by +angle (forward) or -angle (backward: the transpose).
template <class Real>
void rotate(Real* x, size_t rows, size_t heads, size_t head_dim, const Real* cos, const Real* sin,
            double direction) {
  const size_t half = head_dim / 2;
  for (size_t r = 0; r < rows; ++r) {
    const Real* c = cos + r * half;
    const Real* s = sin + r * half;
    for (size_t h = 0; h < heads; ++h) {
      Real* v = x + (r * heads + h) * head_dim;
      for (size_t i = 0; i < half; ++i) {
        const double a = v[i];
        const double b = v[i + half];
        const double ci = c[i];
        const double si = direction * double(s[i]);
        v[i] = Real(a * ci - b * si);
        v[i + half] = Real(b * ci + a * si);
      }
    }
  }
}

}  // namespace

template <class Real>
void rope_forward(Real* x, size_t rows, size_t heads, size_t head_dim, const Real* cos,
                  const Real* sin) {
  rotate(x, rows, heads, head_dim, cos, sin, 1.0);
}

template <class Real>
void rope_backward(Real* dx, size_t rows, size_t heads, size_t head_dim, const Real* cos,
                   const Real* sin) {
  rotate(dx, rows, heads, head_dim, cos, sin, -1.0);
}

template <class Real>
void attention_forward(const Real* q, const Real* k, const Real* v, const AttentionShape& shape,
                       std::span<const int32_t> doc_offsets, Real* out, double* lse,
                       uint32_t threads) {
  HSRING_REQUIRE(is_doc_partition(doc_offsets, shape.rows) && shape.kv_heads > 0 &&
                 shape.heads % shape.kv_heads == 0 && shape.window > 0);
  const size_t rows = shape.rows, heads = shape.heads, hd = shape.head_dim;
  const DocBounds bounds = doc_bounds(doc_offsets, rows);
  const size_t group = heads / shape.kv_heads;
  const size_t q_stride = heads * hd;
  const size_t kv_stride = shape.kv_heads * hd;
  const double scale = 1.0 / std::sqrt(double(hd));
  const size_t span = std::min(shape.window, bounds.longest);
  parallel_for(rows, threads_for(rows * span * q_stride, threads), 1,
               [&](size_t begin, size_t end) {
                 std::vector<double> scores(span);
                 std::vector<double> acc(hd);
                 for (size_t t = begin; t < end; ++t) {
                   const size_t lo = first_key(t, bounds.start[t], shape.window);
                   const size_t n = t - lo + 1;
                   for (size_t h = 0; h < heads; ++h) {
                     const Real* qh = q + t * q_stride + h * hd;
                     const size_t kv_offset = (h / group) * hd;
                     double max_score = -std::numeric_limits<double>::infinity();
                     for (size_t j = 0; j < n; ++j) {
                       scores[j] = dot(qh, k + (lo + j) * kv_stride + kv_offset, hd) * scale;
                       max_score = std::max(max_score, scores[j]);
                     }
                     double total = 0;
                     std::fill(acc.begin(), acc.end(), 0.0);
                     for (size_t j = 0; j < n; ++j) {
                       const double p = std::exp(scores[j] - max_score);
                       total += p;
                       axpy(p, v + (lo + j) * kv_stride + kv_offset, acc.data(), hd);
                     }
                     Real* o = out + t * q_stride + h * hd;
                     for (size_t i = 0; i < hd; ++i) o[i] = Real(acc[i] / total);
                     lse[t * heads + h] = max_score + std::log(total);
                   }
                 }
               });
}

template <class Real>
void attention_backward(const Real* q, const Real* k, const Real* v, const Real* out,
                        const Real* dout, const double* lse, const AttentionShape& shape,
                        std::span<const int32_t> doc_offsets, Real* dq, Real* dk, Real* dv,
                        uint32_t threads) {
  // With p_j = softmax(s)_j, s_j = scale q.k_j, o = sum_j p_j v_j:
  //   dv_j += p_j do,  ds_j = p_j (do.v_j - do.o),  dq += scale ds_j k_j,  dk_j += scale ds_j q.
  const size_t rows = shape.rows, heads = shape.heads, hd = shape.head_dim;
  const DocBounds bounds = doc_bounds(doc_offsets, rows);
  const size_t group = heads / shape.kv_heads;
  const size_t q_stride = heads * hd;
  const size_t kv_stride = shape.kv_heads * hd;
  const double scale = 1.0 / std::sqrt(double(hd));
  const size_t span = std::min(shape.window, bounds.longest);
  const uint32_t use = threads_for(rows * span * q_stride * 2, threads);

  // delta[t, h] = do . o: the softmax Jacobian's correction term of each query.
  std::vector<double> delta(rows * heads);
  for (size_t i = 0; i < rows * heads; ++i) delta[i] = dot(dout + i * hd, out + i * hd, hd);

  // The probability of query (t, h) on key row j, recomputed exactly as the forward did.
  const auto prob = [&](size_t t, size_t h, size_t j) {
    const double s = dot(q + t * q_stride + h * hd, k + j * kv_stride + (h / group) * hd, hd);
    return std::exp(s * scale - lse[t * heads + h]);
  };

  // dq: one query row at a time.
  parallel_for(rows, use, 1, [&](size_t begin, size_t end) {
    std::vector<double> acc(hd);
    for (size_t t = begin; t < end; ++t) {
      const size_t lo = first_key(t, bounds.start[t], shape.window);
      for (size_t h = 0; h < heads; ++h) {
        const Real* doh = dout + t * q_stride + h * hd;
        const size_t kv_offset = (h / group) * hd;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (size_t j = lo; j <= t; ++j) {
          const double p = prob(t, h, j);
          const double ds =
              p * (dot(doh, v + j * kv_stride + kv_offset, hd) - delta[t * heads + h]);
          axpy(ds, k + j * kv_stride + kv_offset, acc.data(), hd);
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
      const size_t t_end = last_query_end(j, bounds.end[j], shape.window);
      for (size_t g = 0; g < shape.kv_heads; ++g) {
        const Real* vj = v + j * kv_stride + g * hd;
        std::fill(acc_k.begin(), acc_k.end(), 0.0);
        std::fill(acc_v.begin(), acc_v.end(), 0.0);
        for (size_t t = j; t < t_end; ++t) {
          for (size_t h = g * group; h < (g + 1) * group; ++h) {
            const Real* doh = dout + t * q_stride + h * hd;
            const double p = prob(t, h, j);
            const double ds = p * (dot(doh, vj, hd) - delta[t * heads + h]);
            axpy(ds, q + t * q_stride + h * hd, acc_k.data(), hd);
            axpy(p, doh, acc_v.data(), hd);
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

template <class Real>
void swiglu_forward(const Real* gate, const Real* up, size_t n, Real* out) {
  for (size_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = Real(g / (1.0 + std::exp(-g)) * double(up[i]));
  }
}

template <class Real>
void swiglu_backward(const Real* gate, const Real* up, const Real* dout, size_t n, Real* dgate,
                     Real* dup) {
  // silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))).
  for (size_t i = 0; i < n; ++i) {
    const double g = gate[i];
    const double sig = 1.0 / (1.0 + std::exp(-g));
    const double d = dout[i];
    dgate[i] = Real(d * double(up[i]) * sig * (1.0 + g * (1.0 - sig)));
    dup[i] = Real(d * g * sig);
  }
}

template <class Real>
void embedding_forward(const Real* table, const int32_t* tokens, size_t rows, size_t dim, Real* y,
                       bool accumulate) {
  for (size_t r = 0; r < rows; ++r) {
    const Real* e = table + size_t(tokens[r]) * dim;
    Real* yr = y + r * dim;
    for (size_t i = 0; i < dim; ++i) yr[i] = accumulate ? Real(double(yr[i]) + double(e[i])) : e[i];
  }
}

template <class Real>
void embedding_backward(const int32_t* tokens, const Real* dy, size_t rows, size_t dim,
                        Real* dtable) {
  // Rows grouped by token, each group in row order: one double sum per token.
  std::vector<size_t> order(rows);
  for (size_t r = 0; r < rows; ++r) order[r] = r;
  std::stable_sort(order.begin(), order.end(),
                   [tokens](size_t a, size_t b) { return tokens[a] < tokens[b]; });
  std::vector<double> acc(dim);
  for (size_t i = 0; i < rows;) {
    const int32_t token = tokens[order[i]];
    std::fill(acc.begin(), acc.end(), 0.0);
    for (; i < rows && tokens[order[i]] == token; ++i)
      axpy(1.0, dy + order[i] * dim, acc.data(), dim);
    store_row(acc.data(), dim, dtable + size_t(token) * dim, true);
  }
}

template <class Real>
CrossEntropySums cross_entropy(const Real* logits, const int32_t* labels, size_t rows, size_t vocab,
                               double grad_scale, Real* dlogits, uint32_t threads) {
  HSRING_REQUIRE(std::all_of(labels, labels + rows,
                             [vocab](int32_t label) { return label < int64_t(vocab); }));
  enum : uint8_t { kIgnored = 0, kCounted = 1, kAgreed = 2 };
  std::vector<double> row_loss(rows, 0.0);
  std::vector<uint8_t> row_state(rows, kIgnored);
  parallel_for(rows, threads_for(rows * vocab * 8, threads), 1, [&](size_t begin, size_t end) {
    for (size_t r = begin; r < end; ++r) {
      const Real* x = logits + r * vocab;
      Real* d = dlogits ? dlogits + r * vocab : nullptr;
      const int32_t label = labels[r];
      if (label < 0) {
        if (d) std::fill(d, d + vocab, Real(0));
        continue;
      }
      const size_t best = argmax(x, vocab);
      const double max_logit = x[best];
      double total = 0;
      for (size_t i = 0; i < vocab; ++i) total += std::exp(double(x[i]) - max_logit);
      const double lse = max_logit + std::log(total);
      row_loss[r] = lse - double(x[label]);
      row_state[r] = best == size_t(label) ? kAgreed : kCounted;
      if (d) {
        for (size_t i = 0; i < vocab; ++i) {
          const double p = std::exp(double(x[i]) - lse);
          d[i] = Real(grad_scale * (i == size_t(label) ? p - 1.0 : p));
        }
      }
    }
  });
  // Summed in row order: the same bits for any thread count.
  CrossEntropySums sums;
  for (size_t r = 0; r < rows; ++r) {
    if (row_state[r] == kIgnored) continue;
    sums.loss += row_loss[r];
    ++sums.counted;
    if (row_state[r] == kAgreed) ++sums.agreed;
  }
  return sums;
}

#define HSRING_TRAIN_INSTANTIATE(Real)                                                             \
  template void linear_forward(const Real*, size_t, size_t, const Real*, size_t, Real*, uint32_t); \
  template void linear_backward_input(const Real*, size_t, size_t, const Real*, size_t, Real*,     \
                                      bool, uint32_t);                                             \
  template void linear_backward_weight(const Real*, size_t, size_t, const Real*, size_t, Real*,    \
                                       uint32_t);                                                  \
  template void rms_norm_forward(const Real*, const Real*, size_t, size_t, double, Real*);         \
  template void rms_norm_backward(const Real*, const Real*, const Real*, size_t, size_t, double,   \
                                  Real*, bool, Real*);                                             \
  template void rope_table(std::span<const int32_t>, size_t, double, Real*, Real*);                \
  template void rope_forward(Real*, size_t, size_t, size_t, const Real*, const Real*);             \
  template void rope_backward(Real*, size_t, size_t, size_t, const Real*, const Real*);            \
  template void attention_forward(const Real*, const Real*, const Real*, const AttentionShape&,    \
                                  std::span<const int32_t>, Real*, double*, uint32_t);             \
  template void attention_backward(const Real*, const Real*, const Real*, const Real*,             \
                                   const Real*, const double*, const AttentionShape&,              \
                                   std::span<const int32_t>, Real*, Real*, Real*, uint32_t);       \
  template void swiglu_forward(const Real*, const Real*, size_t, Real*);                           \
  template void swiglu_backward(const Real*, const Real*, const Real*, size_t, Real*, Real*);      \
  template void embedding_forward(const Real*, const int32_t*, size_t, size_t, Real*, bool);       \
  template void embedding_backward(const int32_t*, const Real*, size_t, size_t, Real*);            \
  template CrossEntropySums cross_entropy(const Real*, const int32_t*, size_t, size_t, double,     \
                                          Real*, uint32_t);

HSRING_TRAIN_INSTANTIATE(float)
HSRING_TRAIN_INSTANTIATE(double)
#undef HSRING_TRAIN_INSTANTIATE

}  // namespace hsring::train
