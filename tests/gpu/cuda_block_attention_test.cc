// The tensor-core block attention (train/cuda_block_attention_bf16.h) against the fp32
// kernels (train/cuda_block_attention.h, themselves checked against the CPU model by
// cuda_dflash_test) on random inputs: forward and backward within bf16 rounding, every
// output element written, context rows no block sees with zero gradients, the same bits on
// a second run and from inputs given in bf16. The key-side plan is checked on the host.
#include "train/cuda_block_attention_bf16.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "common/random.h"
#include "gpu/cuda_check.h"
#include "gpu/cuda_handles.h"
#include "gpu_test_util.h"

namespace hsring::train {
namespace {

struct Shape {
  const char* name;
  uint32_t heads, kv_heads, head_dim, block_size;
  std::vector<int32_t> doc_offsets;
  // Per document, the anchors' offsets into it (ascending); the block sees the rows before.
  std::vector<std::vector<int32_t>> anchors;
};

void PrintTo(const Shape& s, std::ostream* os) { *os << s.name; }

// Documents whose first anchor is at their start (an empty context), long contexts whose
// first tiles are seen by more than 16 blocks (the key side's chunked sums), and rows
// after a document's last anchor that no block sees.
std::vector<Shape> shapes() {
  std::vector<int32_t> many;  // 40 anchors over a 700-row document
  for (int32_t i = 0; i < 40; ++i) many.push_back(5 + i * 17);
  return {
      {"hd128_gqa4_b16", 8, 2, 128, 16, {0, 700, 760, 1000}, {many, {0, 30}, {0, 1, 200}}},
      {"hd64_mha_b8", 4, 4, 64, 8, {0, 150, 900}, {{0, 64, 65, 140}, many}},
      {"hd256_gqa4_b16", 4, 1, 256, 16, {0, 700, 733}, {many, {0, 17, 32}}},
      {"hd32_two_query_chunks_b40", 8, 2, 32, 40, {0, 90, 800}, {{0, 89}, many}},
      {"hd128_long_block_b80", 2, 1, 128, 80, {0, 100, 300}, {{10, 99}, {0, 150, 199}}},
  };
}

std::vector<float> random_floats(size_t n, uint64_t seed, float scale) {
  std::vector<float> out(n);
  uint64_t state = seed;
  for (float& v : out)
    v = scale * (float(double(splitmix64(state) >> 11) / double(1ull << 53)) * 2.0f - 1.0f);
  return out;
}

double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (double(got[i]) - double(want[i])) * (double(got[i]) - double(want[i]));
    norm += double(want[i]) * double(want[i]);
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

struct Problem {
  BlockAttentionShape dims;
  std::vector<int32_t> context;                                // [blocks * 2]
  std::vector<float> q, ctx_k, ctx_v, block_k, block_v, dout;  // host inputs
};

Problem make_problem(const Shape& s, uint64_t seed) {
  Problem p;
  for (size_t doc = 0; doc < s.anchors.size(); ++doc)
    for (int32_t anchor : s.anchors[doc]) {
      p.context.push_back(s.doc_offsets[doc]);
      p.context.push_back(s.doc_offsets[doc] + anchor);
    }
  const uint32_t blocks = uint32_t(p.context.size() / 2);
  p.dims = {blocks, s.block_size, uint32_t(s.doc_offsets.back()), s.heads, s.kv_heads, s.head_dim};
  const size_t rows = size_t(blocks) * s.block_size, hd = s.head_dim;
  // Scores of a few units: softmaxes neither flat nor one-hot.
  p.q = random_floats(rows * s.heads * hd, seed, 1.5f);
  p.ctx_k = random_floats(size_t(p.dims.context_rows) * s.kv_heads * hd, seed + 1, 1.5f);
  p.ctx_v = random_floats(size_t(p.dims.context_rows) * s.kv_heads * hd, seed + 2, 1.0f);
  p.block_k = random_floats(rows * s.kv_heads * hd, seed + 3, 1.5f);
  p.block_v = random_floats(rows * s.kv_heads * hd, seed + 4, 1.0f);
  p.dout = random_floats(rows * s.heads * hd, seed + 5, 1.0f);
  return p;
}

gpu::DeviceBuffer upload(const void* data, size_t bytes) {
  gpu::DeviceBuffer buffer = gpu::DeviceBuffer::allocate(std::max<size_t>(bytes, 16));
  if (bytes > 0) HSRING_CUDA_CHECK(cudaMemcpy(buffer.data(), data, bytes, cudaMemcpyHostToDevice));
  return buffer;
}
template <class T>
gpu::DeviceBuffer upload(const std::vector<T>& v) {
  return upload(v.data(), v.size() * sizeof(T));
}
// An output buffer filled with NaNs, so that an element the kernel skips shows.
gpu::DeviceBuffer poisoned(size_t floats) {
  gpu::DeviceBuffer buffer = gpu::DeviceBuffer::allocate(std::max<size_t>(floats, 4) * 4);
  HSRING_CUDA_CHECK(cudaMemset(buffer.data(), 0xFF, buffer.size()));
  return buffer;
}
std::vector<float> download(const gpu::DeviceBuffer& buffer, size_t floats) {
  std::vector<float> out(floats);
  HSRING_CUDA_CHECK(cudaMemcpy(out.data(), buffer.data(), floats * 4, cudaMemcpyDeviceToHost));
  return out;
}

// Forward and backward outputs, downloaded.
struct Results {
  std::vector<float> out, lse, dq, d_ctx_k, d_ctx_v, d_block_k, d_block_v;
  std::vector<uint16_t> out_bf16;  // kBf16Inputs: the forward's bf16 copy of out
};

// kBf16Inputs: the tensor-core kernels given q, k and v already in bf16 (rounded here).
enum class Kernels { kFp32, kBf16, kBf16Inputs };

gpu::DeviceBuffer upload_rounded(const std::vector<float>& v) {
  return upload(gpu_test::float_to_bf16(v));
}

Results run(const Problem& p, Kernels kernels) {
  const bool bf16 = kernels != Kernels::kFp32;
  const BlockAttentionShape& d = p.dims;
  const size_t rows = size_t(d.blocks) * d.block_size, hd = d.head_dim;
  const size_t q_floats = rows * d.heads * hd,
               ctx_floats = size_t(d.context_rows) * d.kv_heads * hd;
  const size_t block_floats = rows * d.kv_heads * hd;
  gpu::DeviceBuffer q = upload(p.q), ctx_k = upload(p.ctx_k), ctx_v = upload(p.ctx_v);
  gpu::DeviceBuffer block_k = upload(p.block_k), block_v = upload(p.block_v);
  gpu::DeviceBuffer dout = upload(p.dout), context = upload(p.context);
  gpu::DeviceBuffer out = poisoned(q_floats), lse = poisoned(rows * d.heads);
  gpu::DeviceBuffer delta = poisoned(rows * d.heads), dq = poisoned(q_floats);
  gpu::DeviceBuffer d_ctx_k = poisoned(ctx_floats), d_ctx_v = poisoned(ctx_floats);
  gpu::DeviceBuffer d_block_k = poisoned(block_floats), d_block_v = poisoned(block_floats);
  cudaStream_t s = nullptr;
  gpu::DeviceBuffer out16 = poisoned(q_floats / 2 + 1);  // NaN pairs
  if (bf16) {
    const BlockKeyPlan plan = block_key_plan(p.context.data(), d);
    gpu::DeviceBuffer work = upload(plan.work), sums = upload(plan.sums);
    gpu::DeviceBuffer workspace =
        gpu::DeviceBuffer::allocate(block_attention_bf16_workspace_bytes(d, plan.partial_slots));
    if (kernels == Kernels::kBf16Inputs) {
      gpu::DeviceBuffer q16 = upload_rounded(p.q), ctx_k16 = upload_rounded(p.ctx_k),
                        ctx_v16 = upload_rounded(p.ctx_v), block_k16 = upload_rounded(p.block_k),
                        block_v16 = upload_rounded(p.block_v);
      const BlockAttentionBf16Inputs in{q16.as<uint16_t>(), ctx_k16.as<uint16_t>(),
                                        ctx_v16.as<uint16_t>(), block_k16.as<uint16_t>(),
                                        block_v16.as<uint16_t>()};
      // These calls also start the query side's blocks longest first, as the trainer does.
      gpu::DeviceBuffer order = upload(longest_context_first(p.context.data(), d.blocks));
      EXPECT_EQ(launch_block_attention_forward_bf16(in, context.as<int32_t>(), d, workspace.data(),
                                                    nullptr, lse.as<float>(), s, nullptr,
                                                    order.as<int32_t>()),
                cudaErrorInvalidValue)
          << "no output at all";
      // As the trainer runs it: bf16 out only, which the backward reads. Then again with the
      // fp32 out, for the comparison (the caller checks out_bf16 is out rounded).
      HSRING_CUDA_CHECK(launch_block_attention_forward_bf16(
          in, context.as<int32_t>(), d, workspace.data(), nullptr, lse.as<float>(), s,
          out16.as<uint16_t>(), order.as<int32_t>()));
      gpu::DeviceBuffer out16_again = poisoned(q_floats / 2 + 1);
      HSRING_CUDA_CHECK(launch_block_attention_forward_bf16(
          in, context.as<int32_t>(), d, workspace.data(), out.as<float>(), lse.as<float>(), s,
          out16_again.as<uint16_t>(), order.as<int32_t>()));
      HSRING_CUDA_CHECK(launch_block_attention_backward_bf16(
          in, out16.as<uint16_t>(), dout.as<float>(), lse.as<float>(), context.as<int32_t>(),
          work.as<BlockKeyWork>(), uint32_t(plan.work.size()), sums.as<BlockKeySum>(),
          uint32_t(plan.sums.size()), d, workspace.data(), delta.as<float>(), dq.as<float>(),
          d_ctx_k.as<float>(), d_ctx_v.as<float>(), d_block_k.as<float>(), d_block_v.as<float>(), s,
          order.as<int32_t>()));
      HSRING_CUDA_CHECK(cudaDeviceSynchronize());  // before the bf16 inputs are freed
    } else {
      HSRING_CUDA_CHECK(launch_block_attention_forward_bf16(
          q.as<float>(), ctx_k.as<float>(), ctx_v.as<float>(), block_k.as<float>(),
          block_v.as<float>(), context.as<int32_t>(), d, workspace.data(), out.as<float>(),
          lse.as<float>(), s));
      HSRING_CUDA_CHECK(launch_block_attention_backward_bf16(
          q.as<float>(), ctx_k.as<float>(), ctx_v.as<float>(), block_k.as<float>(),
          block_v.as<float>(), out.as<float>(), dout.as<float>(), lse.as<float>(),
          context.as<int32_t>(), work.as<BlockKeyWork>(), uint32_t(plan.work.size()),
          sums.as<BlockKeySum>(), uint32_t(plan.sums.size()), d, workspace.data(),
          delta.as<float>(), dq.as<float>(), d_ctx_k.as<float>(), d_ctx_v.as<float>(),
          d_block_k.as<float>(), d_block_v.as<float>(), s));
      HSRING_CUDA_CHECK(cudaDeviceSynchronize());
    }
  } else {
    const std::vector<BlockKeyTile> tiles = block_key_tiles(p.context.data(), d);
    gpu::DeviceBuffer tiles_d = upload(tiles);
    HSRING_CUDA_CHECK(launch_block_attention_forward(
        q.as<float>(), ctx_k.as<float>(), ctx_v.as<float>(), block_k.as<float>(),
        block_v.as<float>(), context.as<int32_t>(), d, out.as<float>(), lse.as<float>(), s));
    HSRING_CUDA_CHECK(launch_block_attention_backward(
        q.as<float>(), ctx_k.as<float>(), ctx_v.as<float>(), block_k.as<float>(),
        block_v.as<float>(), out.as<float>(), dout.as<float>(), lse.as<float>(),
        context.as<int32_t>(), tiles_d.as<BlockKeyTile>(), uint32_t(tiles.size()), d,
        delta.as<float>(), dq.as<float>(), d_ctx_k.as<float>(), d_ctx_v.as<float>(),
        d_block_k.as<float>(), d_block_v.as<float>(), s));
    HSRING_CUDA_CHECK(cudaDeviceSynchronize());
  }
  Results results{download(out, q_floats),          download(lse, rows * d.heads),
                  download(dq, q_floats),           download(d_ctx_k, ctx_floats),
                  download(d_ctx_v, ctx_floats),    download(d_block_k, block_floats),
                  download(d_block_v, block_floats)};
  if (kernels == Kernels::kBf16Inputs) {
    results.out_bf16.resize(q_floats);
    HSRING_CUDA_CHECK(
        cudaMemcpy(results.out_bf16.data(), out16.data(), q_floats * 2, cudaMemcpyDeviceToHost));
  }
  return results;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// Every output of `got` has the bits of `want`'s.
void expect_same_bits(const Results& got, const Results& want) {
  EXPECT_TRUE(same_bits(got.out, want.out)) << "out";
  EXPECT_TRUE(same_bits(got.lse, want.lse)) << "lse";
  EXPECT_TRUE(same_bits(got.dq, want.dq)) << "dq";
  EXPECT_TRUE(same_bits(got.d_ctx_k, want.d_ctx_k)) << "d_ctx_k";
  EXPECT_TRUE(same_bits(got.d_ctx_v, want.d_ctx_v)) << "d_ctx_v";
  EXPECT_TRUE(same_bits(got.d_block_k, want.d_block_k)) << "d_block_k";
  EXPECT_TRUE(same_bits(got.d_block_v, want.d_block_v)) << "d_block_v";
}

class CudaBlockAttentionBf16Test : public ::testing::TestWithParam<Shape> {};

TEST_P(CudaBlockAttentionBf16Test, MatchesTheFp32KernelWithinBf16Rounding) {
  HSRING_REQUIRE_GPUS(1);
  const Shape& shape = GetParam();
  ASSERT_TRUE(block_attention_bf16_supported(shape.head_dim));
  const Problem p = make_problem(shape, 42);
  const Results want = run(p, Kernels::kFp32), got = run(p, Kernels::kBf16);
  const std::pair<const char*, std::pair<const std::vector<float>*, const std::vector<float>*>>
      outputs[] = {{"out", {&got.out, &want.out}},
                   {"dq", {&got.dq, &want.dq}},
                   {"d_ctx_k", {&got.d_ctx_k, &want.d_ctx_k}},
                   {"d_ctx_v", {&got.d_ctx_v, &want.d_ctx_v}},
                   {"d_block_k", {&got.d_block_k, &want.d_block_k}},
                   {"d_block_v", {&got.d_block_v, &want.d_block_v}}};
  for (const auto& [name, pair] : outputs) {
    const double error = relative_error(*pair.first, *pair.second);
    std::printf("[ bf16     ] %s %s: relative error %.2e\n", shape.name, name, error);
    EXPECT_LE(error, 2e-2) << name;  // NaN (an element not written) fails too
  }
  double worst_lse = 0;
  for (size_t i = 0; i < want.lse.size(); ++i)
    worst_lse = std::max(worst_lse, std::fabs(double(got.lse[i]) - double(want.lse[i])));
  std::printf("[ bf16     ] %s lse: worst absolute error %.2e\n", shape.name, worst_lse);
  EXPECT_LE(worst_lse, 2e-2);
  EXPECT_EQ(std::count_if(got.lse.begin(), got.lse.end(), [](float x) { return std::isnan(x); }),
            0);

  // Context rows after every block's context: zero, as the fp32 kernel leaves them.
  std::vector<bool> seen(p.dims.context_rows, false);
  for (size_t b = 0; b < p.dims.blocks; ++b)
    for (int32_t r = p.context[2 * b]; r < p.context[2 * b + 1]; ++r) seen[size_t(r)] = true;
  const size_t row_floats = size_t(p.dims.kv_heads) * p.dims.head_dim;
  size_t unseen = 0;
  for (size_t r = 0; r < seen.size(); ++r) {
    if (seen[r]) continue;
    ++unseen;
    for (size_t i = r * row_floats; i < (r + 1) * row_floats; ++i) {
      ASSERT_EQ(got.d_ctx_k[i], 0.0f) << "row " << r;
      ASSERT_EQ(got.d_ctx_v[i], 0.0f) << "row " << r;
    }
  }
  EXPECT_GT(unseen, 0u) << "the shape should leave rows no block sees";
}

TEST_P(CudaBlockAttentionBf16Test, TwoRunsGiveTheSameBits) {
  HSRING_REQUIRE_GPUS(1);
  const Problem p = make_problem(GetParam(), 7);
  expect_same_bits(run(p, Kernels::kBf16), run(p, Kernels::kBf16));
}

// kBf16Inputs also runs the query side longest context first (the order changes no bit),
// and its forward writes out in bf16 only, which its backward reads (the fp32 calls round
// their fp32 out where they read it).
TEST_P(CudaBlockAttentionBf16Test, Bf16InputsGiveTheBitsOfTheFp32OnesRounded) {
  HSRING_REQUIRE_GPUS(1);
  const Problem p = make_problem(GetParam(), 11);
  const Results got = run(p, Kernels::kBf16Inputs);
  expect_same_bits(got, run(p, Kernels::kBf16));
  // The forward's bf16 output: out rounded to nearest even, every element written.
  ASSERT_EQ(got.out_bf16.size(), got.out.size());
  for (size_t i = 0; i < got.out.size(); ++i)
    ASSERT_EQ(got.out_bf16[i], gpu_test::float_to_bf16(got.out[i])) << "out_bf16 at " << i;
}

// On Hopper the kernels run on warpgroup products (train/cuda_block_attention_wgmma.cu).
// Against the mma.sync kernels on the same inputs every output agrees within fp32 rounding
// (the forward's online softmax steps over 64 keys there, 32 here, and the odd bf16
// rounding of out, P or dS flips with it).
TEST_P(CudaBlockAttentionBf16Test, WgmmaKernelsMatchTheMmaSyncOnes) {
  HSRING_REQUIRE_GPUS(1);
  const Shape& shape = GetParam();
  if (!block_attention_wgmma_active(shape.head_dim))
    GTEST_SKIP() << "the wgmma kernels take head_dim 128 on sm_90 GPUs only";
  const Problem p = make_problem(shape, 23);
  const Results wgmma = run(p, Kernels::kBf16Inputs);
  set_block_attention_wgmma(false);
  ASSERT_FALSE(block_attention_wgmma_active(shape.head_dim));
  const Results mma_sync = run(p, Kernels::kBf16Inputs);
  set_block_attention_wgmma(true);
  for (const auto& [name, got, want] :
       {std::tuple{"out", &wgmma.out, &mma_sync.out}, std::tuple{"lse", &wgmma.lse, &mma_sync.lse},
        std::tuple{"dq", &wgmma.dq, &mma_sync.dq},
        std::tuple{"d_ctx_k", &wgmma.d_ctx_k, &mma_sync.d_ctx_k},
        std::tuple{"d_ctx_v", &wgmma.d_ctx_v, &mma_sync.d_ctx_v},
        std::tuple{"d_block_k", &wgmma.d_block_k, &mma_sync.d_block_k},
        std::tuple{"d_block_v", &wgmma.d_block_v, &mma_sync.d_block_v}}) {
    const double error = relative_error(*got, *want);
    std::printf("[ wgmma    ] %s %s: relative difference to mma.sync %.2e\n", shape.name, name,
                error);
    EXPECT_LE(error, 1e-3) << name;  // NaN (an element not written) fails too
  }
}

// Where the GPU is Hopper, the wgmma kernels must be taken: a build that lost their sm_90a
// images would otherwise fall back to mma.sync silently.
TEST(CudaBlockAttentionWgmmaTest, TakenOnHopperOnly) {
  HSRING_REQUIRE_GPUS(1);
  int device = 0, major = 0, minor = 0;
  HSRING_CUDA_CHECK(cudaGetDevice(&device));
  HSRING_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  HSRING_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  const bool hopper = major == 9 && minor == 0;
  EXPECT_EQ(block_attention_wgmma_active(128), hopper)
      << "compute capability " << major << "." << minor;
  EXPECT_FALSE(block_attention_wgmma_active(64)) << "head_dim 128 only";
  set_block_attention_wgmma(false);
  EXPECT_FALSE(block_attention_wgmma_active(128));
  set_block_attention_wgmma(true);
}

// The kernels index in 32 bits: a shape with a count past that is refused before any launch
// (no pointer is read), and its key-side plans are empty.
TEST(CudaBlockAttentionTest, ShapesPastThirtyTwoBitsAreRefused) {
  HSRING_REQUIRE_GPUS(1);
  const BlockAttentionShape fits{2, 16, 64, 8, 2, 128};
  for (size_t BlockAttentionShape::*count :
       {&BlockAttentionShape::blocks, &BlockAttentionShape::context_rows,
        &BlockAttentionShape::heads}) {
    BlockAttentionShape shape = fits;
    shape.*count = size_t(UINT32_MAX) + 1;
    const int32_t context[4] = {0, 8, 0, 16};
    EXPECT_TRUE(block_key_tiles(context, shape).empty());
    EXPECT_TRUE(block_key_plan(context, shape).work.empty());
    EXPECT_EQ(launch_block_attention_forward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                             shape, nullptr, nullptr, nullptr),
              cudaErrorInvalidValue);
    EXPECT_EQ(launch_block_attention_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                              nullptr, nullptr, nullptr, nullptr, 0, shape, nullptr,
                                              nullptr, nullptr, nullptr, nullptr, nullptr, nullptr),
              cudaErrorInvalidValue);
    float out = 0;  // an output, so that only the shape can make the call refuse
    EXPECT_EQ(launch_block_attention_forward_bf16(BlockAttentionBf16Inputs{}, nullptr, shape,
                                                  nullptr, &out, nullptr, nullptr),
              cudaErrorInvalidValue);
    EXPECT_EQ(launch_block_attention_backward_bf16(BlockAttentionBf16Inputs{}, nullptr, nullptr,
                                                   nullptr, nullptr, nullptr, 0, nullptr, 0, shape,
                                                   nullptr, nullptr, nullptr, nullptr, nullptr,
                                                   nullptr, nullptr, nullptr),
              cudaErrorInvalidValue);
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "nothing was launched";
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaBlockAttentionBf16Test, ::testing::ValuesIn(shapes()),
                         [](const auto& info) { return std::string(info.param.name); });

// Every block once, the longest context first, ties in block order.
TEST(BlockKeyPlanTest, LongestContextFirstIsAPermutationByDescendingLength) {
  for (const Shape& shape : shapes()) {
    const Problem p = make_problem(shape, 3);
    const uint32_t blocks = p.dims.blocks;
    const std::vector<int32_t> order = longest_context_first(p.context.data(), blocks);
    ASSERT_EQ(order.size(), size_t(blocks));
    std::vector<int> seen(blocks, 0);
    const auto length = [&](int32_t b) { return p.context[2 * b + 1] - p.context[2 * b]; };
    for (size_t i = 0; i < order.size(); ++i) {
      ASSERT_GE(order[i], 0);
      ASSERT_LT(uint32_t(order[i]), blocks);
      ++seen[size_t(order[i])];
      if (i == 0) continue;
      const int32_t a = order[i - 1], b = order[i];
      ASSERT_TRUE(length(a) > length(b) || (length(a) == length(b) && a < b))
          << shape.name << " at " << i;
    }
    for (int count : seen) EXPECT_EQ(count, 1);
  }
}

// The plan on the host: every (context tile, block that sees it) pair in exactly one work
// item, chunked tiles' slots consecutive and summed once, every block's keys covered.
TEST(BlockKeyPlanTest, CoversEveryTileAndBlockOnce) {
  for (const Shape& shape : shapes()) {
    const Problem p = make_problem(shape, 1);
    const BlockAttentionShape& d = p.dims;
    const BlockKeyPlan plan = block_key_plan(p.context.data(), d);
    const uint32_t ctx_tiles = (d.context_rows + 63) / 64;
    std::vector<std::vector<int>> covered(ctx_tiles, std::vector<int>(d.blocks, 0));
    std::vector<int> block_keys(size_t(d.blocks) * d.block_size, 0), slot_used(plan.partial_slots);
    std::vector<int> tile_items(ctx_tiles, 0);
    std::vector<int32_t> slot_key(plan.partial_slots, -1);
    for (const BlockKeyWork& w : plan.work) {
      ASSERT_GE(w.keys, 1);
      ASSERT_LE(w.keys, 64);
      if (w.slot >= 0) {
        ASSERT_LT(size_t(w.slot), plan.partial_slots);
        ++slot_used[size_t(w.slot)];
        slot_key[size_t(w.slot)] = w.first_key;
      }
      if (w.kind == 1) {
        EXPECT_EQ(w.end_block, w.first_block + 1);
        for (int32_t k = w.first_key; k < w.first_key + w.keys; ++k) ++block_keys[size_t(k)];
        continue;
      }
      ASSERT_EQ(w.first_key % 64, 0);
      ++tile_items[size_t(w.first_key / 64)];
      for (int32_t b = w.first_block; b < w.end_block; ++b)
        ++covered[size_t(w.first_key / 64)][size_t(b)];
    }
    for (uint32_t t = 0; t < ctx_tiles; ++t) {
      EXPECT_GE(tile_items[t], 1) << shape.name << " tile " << t;
      for (uint32_t b = 0; b < d.blocks; ++b) {
        const int32_t begin = p.context[2 * b], end = p.context[2 * b + 1];
        const bool sees = end > begin && begin < int32_t(t + 1) * 64 && end > int32_t(t) * 64;
        if (sees) {
          EXPECT_EQ(covered[t][b], 1) << shape.name << " tile " << t << " block " << b;
        }
        EXPECT_LE(covered[t][b], 1);
      }
    }
    for (int count : block_keys) EXPECT_EQ(count, 1);
    for (int count : slot_used) EXPECT_EQ(count, 1);
    size_t summed = 0;
    for (const BlockKeySum& s : plan.sums) {
      EXPECT_GE(s.slots, 2);
      for (int32_t i = s.first_slot; i < s.first_slot + s.slots; ++i)
        EXPECT_EQ(slot_key[size_t(i)], s.first_key) << "slot " << i << " is another tile's";
      summed += size_t(s.slots);
    }
    EXPECT_EQ(summed, plan.partial_slots);
    for (size_t i = 1; i < plan.work.size(); ++i) {
      const BlockKeyWork &before = plan.work[i - 1], &after = plan.work[i];
      ASSERT_GE(before.end_block - before.first_block, after.end_block - after.first_block)
          << shape.name << ": the most blocks first, at item " << i;
    }
    if (std::string(shape.name) == "hd128_gqa4_b16") {
      EXPECT_FALSE(plan.sums.empty()) << "40 blocks see the first tiles: chunked";
    }
  }
}

}  // namespace
}  // namespace hsring::train
