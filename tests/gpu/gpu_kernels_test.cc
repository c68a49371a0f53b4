// The data path's kernels against host references: the synthetic forward writes exactly
// synthetic_element_bits, verification counts exactly the planted mismatches, noise is the
// host's counter-based Gaussian (to one bf16 ulp) and is reproducible from (seed, step),
// and pinned shared memory takes a D2H copy. Skipped, with the reason, without a GPU.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "gpu/cuda_handles.h"
#include "gpu/host_registration.h"
#include "gpu/kernels.h"
#include "gpu/philox.h"
#include "tests/gpu/gpu_test_util.h"
#include "worker/synthetic_batch.h"

namespace hsring::gpu {
namespace {

using gpu_test::bf16_to_float;
using gpu_test::float_to_bf16;

class GpuKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const GpuInventory inventory = probe_gpus();
    if (inventory.count < 1)
      GTEST_SKIP() << "needs a GPU; this machine has none (" << inventory.why_none << ")";
    use_gpu(0);
    stream_ = make_stream();
  }
  template <class T>
  std::vector<T> download(const DeviceBuffer& buffer, size_t count) {
    std::vector<T> host(count);
    HSRING_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
    HSRING_CUDA_CHECK(
        cudaMemcpy(host.data(), buffer.data(), count * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  Stream stream_;
};

// Split layers [K][T][H] as the target's forward writes them, vector and scalar shapes.
TEST_F(GpuKernelsTest, SyntheticLayersMatchTheHostFunction) {
  for (uint32_t hidden : {64u, 33u}) {
    for (uint32_t elem : {2u, 4u}) {
      const uint32_t layers = 3, tokens = 97, max_tokens = 128;
      const uint64_t layer_bytes = uint64_t(max_tokens) * hidden * elem;
      DeviceBuffer buffer = DeviceBuffer::allocate(layer_bytes * layers);
      ASSERT_EQ(launch_synthetic_layers(buffer.data(), layer_bytes, 42, layers, tokens, hidden,
                                        elem, stream_.get()),
                cudaSuccess);
      const auto bytes = download<std::byte>(buffer, layer_bytes * layers);
      for (uint32_t k = 0; k < layers; ++k) {
        for (uint32_t t = 0; t < tokens; ++t) {
          for (uint32_t d = 0; d < hidden; ++d) {
            const std::byte* at =
                bytes.data() + k * layer_bytes + (uint64_t(t) * hidden + d) * elem;
            uint32_t got = 0;
            std::memcpy(&got, at, elem);
            ASSERT_EQ(got, synthetic_element_bits(42, k, t, d, elem))
                << "hidden " << hidden << " elem " << elem << " at " << k << "," << t << "," << d;
          }
        }
      }
    }
  }
}

// The concatenated capture: layer k written into its columns of one [T, K*H] array.
TEST_F(GpuKernelsTest, SyntheticLayersIntoColumnsOfAConcatenatedBatch) {
  for (uint32_t hidden : {64u, 33u}) {
    const uint32_t layers = 5, tokens = 77, elem = 2;
    const uint64_t row = uint64_t(layers) * hidden;
    DeviceBuffer buffer = DeviceBuffer::allocate(tokens * row * elem);
    ASSERT_EQ(launch_synthetic_layers(buffer.data(), uint64_t(hidden) * elem, 8, layers, tokens,
                                      hidden, elem, stream_.get(), row),
              cudaSuccess);
    const auto got = download<uint16_t>(buffer, tokens * row);
    for (uint32_t t = 0; t < tokens; ++t)
      for (uint32_t k = 0; k < layers; ++k)
        for (uint32_t d = 0; d < hidden; ++d)
          ASSERT_EQ(got[t * row + uint64_t(k) * hidden + d], synthetic_element_bits(8, k, t, d, 2))
              << "hidden " << hidden << " at " << t << "," << k << "," << d;
  }
}

// Writes the assembled [T, K*H] batch on the host and uploads it.
DeviceBuffer upload_assembled(uint64_t batch, uint32_t layers, uint32_t tokens, uint32_t hidden,
                              std::vector<uint16_t>& host) {
  host.resize(uint64_t(tokens) * layers * hidden);
  for (uint32_t t = 0; t < tokens; ++t)
    for (uint32_t k = 0; k < layers; ++k)
      for (uint32_t d = 0; d < hidden; ++d)
        host[(uint64_t(t) * layers + k) * hidden + d] =
            uint16_t(synthetic_element_bits(batch, k, t, d, 2));
  DeviceBuffer buffer = DeviceBuffer::allocate(host.size() * 2);
  HSRING_CUDA_CHECK(
      cudaMemcpy(buffer.data(), host.data(), host.size() * 2, cudaMemcpyHostToDevice));
  return buffer;
}

TEST_F(GpuKernelsTest, VerifyCountsExactlyThePlantedMismatches) {
  const uint32_t layers = 5, tokens = 301, hidden = 256;
  std::vector<uint16_t> host;
  DeviceBuffer data = upload_assembled(9, layers, tokens, hidden, host);
  DeviceBuffer verdict = DeviceBuffer::allocate(sizeof(VerifyVerdict));
  auto check = [&](uint64_t batch) {
    EXPECT_EQ(launch_verify_assembled(data.data(), batch, layers, tokens, hidden, 2,
                                      verdict.as<VerifyVerdict>(), stream_.get()),
              cudaSuccess);
    return download<VerifyVerdict>(verdict, 1)[0];
  };
  VerifyVerdict v = check(9);
  EXPECT_EQ(v.mismatches, 0u);
  EXPECT_EQ(v.first_bad, kNoMismatch);
  // Another batch's data: (nearly) everything differs.
  EXPECT_GT(check(10).mismatches, host.size() * 9 / 10);
  // Three planted flips, the lowest at token 7, layer 2, dim 5.
  const uint64_t planted[] = {(7ull * layers + 2) * hidden + 5,
                              (100ull * layers + 4) * hidden + 255,
                              (300ull * layers + 0) * hidden + 0};
  for (uint64_t at : planted) {
    const uint16_t flipped = host[at] ^ 0x0001;
    HSRING_CUDA_CHECK(cudaMemcpy(data.data() + at * 2, &flipped, 2, cudaMemcpyHostToDevice));
  }
  v = check(9);
  EXPECT_EQ(v.mismatches, 3u);
  EXPECT_EQ(v.first_bad, planted[0]);
}

TEST_F(GpuKernelsTest, NoiseMatchesTheHostGeneratorAndIsReproducible) {
  const uint32_t layers = 5, tokens = 123, hidden = 320;
  const float std = 0.5f;
  std::vector<uint16_t> clean;
  DeviceBuffer a = upload_assembled(3, layers, tokens, hidden, clean);
  std::vector<uint16_t> unused;
  DeviceBuffer b = upload_assembled(3, layers, tokens, hidden, unused);
  DeviceBuffer c = upload_assembled(3, layers, tokens, hidden, unused);
  const uint64_t n = clean.size() - 3;  // a tail that is not a whole group of four
  ASSERT_EQ(launch_add_noise(a.data(), n, DType::kBF16, std, 1234, 77, stream_.get()), cudaSuccess);
  ASSERT_EQ(launch_add_noise(b.data(), n, DType::kBF16, std, 1234, 77, stream_.get()), cudaSuccess);
  ASSERT_EQ(launch_add_noise(c.data(), n, DType::kBF16, std, 1234, 78, stream_.get()), cudaSuccess);
  const auto got_a = download<uint16_t>(a, clean.size());
  const auto got_b = download<uint16_t>(b, clean.size());
  const auto got_c = download<uint16_t>(c, clean.size());
  EXPECT_EQ(got_a, got_b) << "the same (seed, step) must give bit-identical noise";
  uint64_t exact = 0, same_as_other_step = 0;
  double sum = 0, sum_sq = 0;
  for (uint64_t i = 0; i < clean.size(); ++i) {
    if (i >= n) {
      EXPECT_EQ(got_a[i], clean[i]) << "element " << i << " is past the count and must stay";
      continue;
    }
    float noise[4];
    gaussian4(1234, 77, i / 4, noise);
    const uint16_t want = float_to_bf16(bf16_to_float(clean[i]) + std * noise[i % 4]);
    const float g = bf16_to_float(got_a[i]), w = bf16_to_float(want);
    ASSERT_LE(std::fabs(g - w),
              gpu_test::noise_tolerance(g, w, bf16_to_float(clean[i]), std * noise[i % 4]))
        << "element " << i << ": further from the host reference than rounding allows";
    exact += got_a[i] == want;
    same_as_other_step += got_c[i] == got_a[i];
    const double added = double(bf16_to_float(got_a[i])) - bf16_to_float(clean[i]);
    sum += added;
    sum_sq += added * added;
  }
  EXPECT_GE(double(exact), 0.999 * double(n));
  EXPECT_LT(double(same_as_other_step), 0.2 * double(n)) << "another step must give other noise";
  EXPECT_NEAR(sum / double(n), 0.0, 0.02);
  EXPECT_NEAR(std::sqrt(sum_sq / double(n)), std, 0.03);
}

TEST_F(GpuKernelsTest, Fp32NoiseMatchesTheHostClosely) {
  const uint64_t n = 4096;
  std::vector<float> host(n, 1.0f);
  DeviceBuffer data = DeviceBuffer::allocate(n * 4);
  HSRING_CUDA_CHECK(cudaMemcpy(data.data(), host.data(), n * 4, cudaMemcpyHostToDevice));
  ASSERT_EQ(launch_add_noise(data.data(), n, DType::kFP32, 0.1f, 5, 6, stream_.get()), cudaSuccess);
  const auto got = download<float>(data, n);
  for (uint64_t i = 0; i < n; ++i) {
    float noise[4];
    gaussian4(5, 6, i / 4, noise);
    ASSERT_NEAR(got[i], 1.0f + 0.1f * noise[i % 4], 1e-5f) << "element " << i;
  }
}

// A cudaHostRegister'ed MAP_SHARED mapping (what the ring is) takes a D2H copy.
TEST_F(GpuKernelsTest, PinnedSharedMappingTakesDeviceCopies) {
  const size_t bytes = 8 << 20;
  void* mapping = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mapping, MAP_FAILED);
  {
    auto pinned = HostRegistration::pin(mapping, bytes, "a test mapping");
    EXPECT_GE(pinned->seconds(), 0);
    DeviceBuffer source = DeviceBuffer::allocate(bytes);
    ASSERT_EQ(launch_synthetic_layers(source.data(), 0, 5, 1, 1024, 4096, 2, stream_.get()),
              cudaSuccess);
    HSRING_CUDA_CHECK(
        cudaMemcpyAsync(mapping, source.data(), bytes, cudaMemcpyDeviceToHost, stream_.get()));
    HSRING_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
    const auto* words = static_cast<const uint16_t*>(mapping);
    EXPECT_EQ(words[4096 * 17 + 3], uint16_t(synthetic_element_bits(5, 0, 17, 3, 2)));
  }
  ::munmap(mapping, bytes);
}

TEST_F(GpuKernelsTest, NonexistentGpuMessageNamesTheRange) {
  const GpuInventory inventory = probe_gpus();
  const std::string problem = gpu_problem(inventory.count + 5, inventory);
  EXPECT_NE(problem.find("GPU " + std::to_string(inventory.count + 5) +
                         " does not exist: this machine has " + std::to_string(inventory.count)),
            std::string::npos)
      << problem;
  EXPECT_EQ(gpu_problem(0, inventory), "");
}

}  // namespace
}  // namespace hsring::gpu
