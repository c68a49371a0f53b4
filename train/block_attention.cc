#include "train/block_attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/parallel.h"
#include "ops/dot.h"
#include "ops/sums.h"

namespace hsring::train {

namespace {

// The sums of ops/ (Sums::kDouble): the same lanes as the decoder layer's attention.
using ops::axpy_double;
using ops::dot_double;
using ops::threads_for;

void check_shape(const BlockAttentionShape& s, std::span<const ContextRange> context) {
  const auto bad = [](const std::string& what) {
    throw Error(Errc::kModel, "block attention: " + what);
  };
  if (s.kv_heads == 0 || s.heads % s.kv_heads != 0)
    bad(fmt::format("heads ({}) must be a multiple of kv_heads ({})", s.heads, s.kv_heads));
  if (context.size() != s.blocks)
    bad(fmt::format("{} context ranges for {} blocks", context.size(), s.blocks));
  for (size_t b = 0; b < context.size(); ++b)
    if (context[b].begin > context[b].end || context[b].end > s.context_rows)
      bad(fmt::format("block {}'s context [{}, {}) is not inside the {} context rows", b,
                      context[b].begin, context[b].end, s.context_rows));
}

// The row-major strides and the scale shared by forward and backward.
struct Geometry {
  size_t hd, heads, group, q_stride, kv_stride, block_size;
  double scale;
  size_t longest_context = 0;

  Geometry(const BlockAttentionShape& s, std::span<const ContextRange> context)
      : hd(s.head_dim),
        heads(s.heads),
        group(s.heads / s.kv_heads),
        q_stride(s.heads * s.head_dim),
        kv_stride(s.kv_heads * s.head_dim),
        block_size(s.block_size),
        scale(1.0 / std::sqrt(double(s.head_dim))) {
    for (const ContextRange& r : context)
      longest_context = std::max(longest_context, r.end - r.begin);
  }
  size_t kv_offset(size_t head) const { return (head / group) * hd; }
};

}  // namespace

template <class Real>
void block_attention_forward(const Real* q, const Real* ctx_k, const Real* ctx_v,
                             const Real* block_k, const Real* block_v,
                             const BlockAttentionShape& shape,
                             std::span<const ContextRange> context, Real* out, double* lse,
                             uint32_t threads) {
  check_shape(shape, context);
  const Geometry g(shape, context);
  const size_t rows = shape.rows(), hd = g.hd, bs = g.block_size;
  const size_t keys_max = g.longest_context + bs;
  parallel_for(
      rows, threads_for(rows * keys_max * g.q_stride, threads), 1, [&](size_t begin, size_t end) {
        std::vector<double> scores(keys_max);
        std::vector<double> acc(hd);
        for (size_t r = begin; r < end; ++r) {
          const size_t b = r / bs;
          const ContextRange c = context[b];
          const size_t n_ctx = c.end - c.begin;
          for (size_t h = 0; h < g.heads; ++h) {
            const Real* qh = q + r * g.q_stride + h * hd;
            const size_t off = g.kv_offset(h);
            // Keys in a fixed order: the context rows, then the block's rows.
            double max_score = -std::numeric_limits<double>::infinity();
            for (size_t j = 0; j < n_ctx; ++j) {
              scores[j] = dot_double(qh, ctx_k + (c.begin + j) * g.kv_stride + off, hd) * g.scale;
              max_score = std::max(max_score, scores[j]);
            }
            for (size_t i = 0; i < bs; ++i) {
              scores[n_ctx + i] =
                  dot_double(qh, block_k + (b * bs + i) * g.kv_stride + off, hd) * g.scale;
              max_score = std::max(max_score, scores[n_ctx + i]);
            }
            double total = 0;
            std::fill(acc.begin(), acc.end(), 0.0);
            for (size_t j = 0; j < n_ctx; ++j) {
              const double p = std::exp(scores[j] - max_score);
              total += p;
              axpy_double(p, ctx_v + (c.begin + j) * g.kv_stride + off, acc.data(), hd);
            }
            for (size_t i = 0; i < bs; ++i) {
              const double p = std::exp(scores[n_ctx + i] - max_score);
              total += p;
              axpy_double(p, block_v + (b * bs + i) * g.kv_stride + off, acc.data(), hd);
            }
            Real* o = out + r * g.q_stride + h * hd;
            for (size_t i = 0; i < hd; ++i) o[i] = Real(acc[i] / total);
            lse[r * g.heads + h] = max_score + std::log(total);
          }
        }
      });
}

template <class Real>
void block_attention_backward(const Real* q, const Real* ctx_k, const Real* ctx_v,
                              const Real* block_k, const Real* block_v, const Real* out,
                              const Real* dout, const double* lse, const BlockAttentionShape& shape,
                              std::span<const ContextRange> context, Real* dq, Real* d_ctx_k,
                              Real* d_ctx_v, Real* d_block_k, Real* d_block_v, uint32_t threads) {
  // With p_j = softmax(s)_j, s_j = scale q.k_j, o = sum_j p_j v_j:
  //   dv_j += p_j do,  ds_j = p_j (do.v_j - do.o),  dq += scale ds_j k_j,  dk_j += scale ds_j q.
  check_shape(shape, context);
  const Geometry g(shape, context);
  const size_t rows = shape.rows(), hd = g.hd, bs = g.block_size, heads = g.heads;
  const uint32_t use = threads_for(rows * (g.longest_context + bs) * g.q_stride * 2, threads);

  // delta[r, h] = do . o: the softmax Jacobian's correction term of each query.
  std::vector<double> delta(rows * heads);
  for (size_t i = 0; i < rows * heads; ++i) delta[i] = dot_double(dout + i * hd, out + i * hd, hd);

  // The probability of query (r, h) on the key at `key`, recomputed as the forward did.
  const auto prob = [&](size_t r, size_t h, const Real* key) {
    const double s = dot_double(q + r * g.q_stride + h * hd, key, hd);
    return std::exp(s * g.scale - lse[r * heads + h]);
  };

  // dq: one query row at a time, keys in the forward's order.
  parallel_for(rows, use, 1, [&](size_t begin, size_t end) {
    std::vector<double> acc(hd);
    for (size_t r = begin; r < end; ++r) {
      const size_t b = r / bs;
      const ContextRange c = context[b];
      for (size_t h = 0; h < heads; ++h) {
        const Real* doh = dout + r * g.q_stride + h * hd;
        const size_t off = g.kv_offset(h);
        const double dl = delta[r * heads + h];
        std::fill(acc.begin(), acc.end(), 0.0);
        const auto add_key = [&](const Real* k, const Real* v) {
          const double ds = prob(r, h, k) * (dot_double(doh, v, hd) - dl);
          axpy_double(ds, k, acc.data(), hd);
        };
        for (size_t j = c.begin; j < c.end; ++j)
          add_key(ctx_k + j * g.kv_stride + off, ctx_v + j * g.kv_stride + off);
        for (size_t i = b * bs; i < (b + 1) * bs; ++i)
          add_key(block_k + i * g.kv_stride + off, block_v + i * g.kv_stride + off);
        Real* dqh = dq + r * g.q_stride + h * hd;
        for (size_t i = 0; i < hd; ++i) dqh[i] = Real(acc[i] * g.scale);
      }
    }
  });

  // The gradient of one key row and its value row over the query rows [q_begin, q_end) that
  // see them, in row then head order; written as a whole (one writer per element).
  const auto key_gradient = [&](const Real* k, const Real* v, size_t kv_head,
                                std::span<const std::pair<size_t, size_t>> query_ranges,
                                double* acc_k, double* acc_v, Real* dk, Real* dv) {
    std::fill(acc_k, acc_k + hd, 0.0);
    std::fill(acc_v, acc_v + hd, 0.0);
    for (const auto& [q_begin, q_end] : query_ranges)
      for (size_t r = q_begin; r < q_end; ++r)
        for (size_t h = kv_head * g.group; h < (kv_head + 1) * g.group; ++h) {
          const Real* doh = dout + r * g.q_stride + h * hd;
          const double p = prob(r, h, k);
          const double ds = p * (dot_double(doh, v, hd) - delta[r * heads + h]);
          axpy_double(ds, q + r * g.q_stride + h * hd, acc_k, hd);
          axpy_double(p, doh, acc_v, hd);
        }
    for (size_t i = 0; i < hd; ++i) {
      dk[i] = Real(acc_k[i] * g.scale);
      dv[i] = Real(acc_v[i]);
    }
  };

  // Block keys: one block key row at a time, over its own block's query rows.
  parallel_for(rows, use, 1, [&](size_t begin, size_t end) {
    std::vector<double> acc_k(hd), acc_v(hd);
    for (size_t i = begin; i < end; ++i) {
      const size_t b = i / bs;
      const std::pair<size_t, size_t> queries[1] = {{b * bs, (b + 1) * bs}};
      for (size_t kv = 0; kv < shape.kv_heads; ++kv) {
        const size_t at = i * g.kv_stride + kv * hd;
        key_gradient(block_k + at, block_v + at, kv, queries, acc_k.data(), acc_v.data(),
                     d_block_k + at, d_block_v + at);
      }
    }
  });

  // Context keys: one context row at a time, over the blocks that see it (ascending).
  const size_t ctx_rows = shape.context_rows;
  parallel_for(ctx_rows, use, 1, [&](size_t begin, size_t end) {
    std::vector<double> acc_k(hd), acc_v(hd);
    std::vector<std::pair<size_t, size_t>> queries;
    for (size_t j = begin; j < end; ++j) {
      queries.clear();
      for (size_t b = 0; b < shape.blocks; ++b)
        if (context[b].begin <= j && j < context[b].end) queries.emplace_back(b * bs, (b + 1) * bs);
      for (size_t kv = 0; kv < shape.kv_heads; ++kv) {
        const size_t at = j * g.kv_stride + kv * hd;
        key_gradient(ctx_k + at, ctx_v + at, kv, queries, acc_k.data(), acc_v.data(), d_ctx_k + at,
                     d_ctx_v + at);
      }
    }
  });
}

#define HSRING_BLOCK_ATTENTION_INSTANTIATE(Real)                                                  \
  template void block_attention_forward(const Real*, const Real*, const Real*, const Real*,       \
                                        const Real*, const BlockAttentionShape&,                  \
                                        std::span<const ContextRange>, Real*, double*, uint32_t); \
  template void block_attention_backward(                                                         \
      const Real*, const Real*, const Real*, const Real*, const Real*, const Real*, const Real*,  \
      const double*, const BlockAttentionShape&, std::span<const ContextRange>, Real*, Real*,     \
      Real*, Real*, Real*, uint32_t);

HSRING_BLOCK_ATTENTION_INSTANTIATE(float)
HSRING_BLOCK_ATTENTION_INSTANTIATE(double)
#undef HSRING_BLOCK_ATTENTION_INSTANTIATE

}  // namespace hsring::train
