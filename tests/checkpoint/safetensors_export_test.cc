// The safetensors export, read back by hsring's own safetensors reader (model/).
#include "checkpoint/safetensors_export.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <random>

#include "common/error.h"
#include "model/float_convert.h"
#include "model/safetensors.h"
#include "test_checkpoints.h"

namespace hsring::checkpoint {
namespace {

std::vector<Tensor> sample_tensors() {
  std::mt19937_64 rng(51);
  std::vector<Tensor> tensors;
  tensors.push_back({"fc.weight", {3, 5}, {}});
  tensors.push_back({"fc.bias", {5}, {}});
  tensors.push_back({"scale", {}, {}});                  // a scalar
  tensors.push_back({"empty", {0, 4}, {}});              // no elements
  tensors.push_back({"odd \"name\"\\\x01 é", {2}, {}});  // escaped in JSON, UTF-8 kept
  for (Tensor& t : tensors) {
    size_t count = 1;
    for (int64_t d : t.shape) count *= size_t(d);
    t.data.resize(count);
    for (float& v : t.data) v = float(int64_t(rng() % 20001) - 10000) / 1013.0f;
  }
  tensors[0].data[0] = -0.0f;
  tensors[0].data[1] = std::bit_cast<float>(0x7FC00001u);  // a NaN with a payload
  return tensors;
}

std::vector<float> read_back(const SafetensorsFile& file, const Tensor& t) {
  std::vector<float> out(t.data.size());
  file.read_as_float(t.name, t.shape, out);
  return out;
}

TEST(SafetensorsExportTest, F32RoundTripIsBitExact) {
  test::TempDir dir;
  const std::vector<Tensor> tensors = sample_tensors();
  ExportOptions options;
  options.metadata = {{"format", "pt"}, {"step", "1200"}, {"note", "line\nbreak \"q\""}};
  const std::string path = dir.file("drafter.safetensors");
  export_safetensors(path, tensors, options);

  const auto file = SafetensorsFile::open(path);
  ASSERT_EQ(file->tensors().size(), tensors.size());
  for (const Tensor& t : tensors) {
    const TensorInfo* info = file->find(t.name);
    ASSERT_NE(info, nullptr) << t.name;
    EXPECT_EQ(info->dtype, "F32");
    EXPECT_EQ(info->shape, t.shape);
    const std::vector<float> back = read_back(*file, t);
    if (!back.empty()) {
      EXPECT_EQ(std::memcmp(back.data(), t.data.data(), back.size() * 4), 0);
    }
  }
  // The header carries the metadata, and the data starts 8-byte aligned.
  const std::vector<std::byte> bytes = test::read_bytes(path);
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  EXPECT_EQ(header_size % 8, 0u);
  const std::string header(reinterpret_cast<const char*>(bytes.data() + 8), header_size);
  EXPECT_NE(
      header.find(R"("__metadata__":{"format":"pt","note":"line\nbreak \"q\"","step":"1200"})"),
      std::string::npos)
      << header;
  EXPECT_EQ(test::list_names(dir.path()), std::vector<std::string>{"drafter.safetensors"});
}

TEST(SafetensorsExportTest, Bf16RoundsToNearestEven) {
  test::TempDir dir;
  const std::vector<Tensor> tensors = sample_tensors();
  ExportOptions options;
  options.dtype = ExportDtype::kBF16;
  const std::string path = dir.file("drafter-bf16.safetensors");
  export_safetensors(path, tensors, options);
  const auto file = SafetensorsFile::open(path);
  for (const Tensor& t : tensors) {
    EXPECT_EQ(file->find(t.name)->dtype, "BF16");
    const std::vector<float> back = read_back(*file, t);
    for (size_t i = 0; i < back.size(); ++i)
      EXPECT_EQ(std::bit_cast<uint32_t>(back[i]),
                std::bit_cast<uint32_t>(bf16_to_float(float_to_bf16(t.data[i]))))
          << t.name << "[" << i << "]";
  }
  EXPECT_EQ(std::filesystem::file_size(path) % 2, 0u);
}

TEST(SafetensorsExportTest, ReplacesAnExistingFile) {
  test::TempDir dir;
  const std::string path = dir.file("w.safetensors");
  test::write_bytes(path, std::vector<std::byte>(5));
  export_safetensors(path, sample_tensors());
  EXPECT_EQ(SafetensorsFile::open(path)->tensors().size(), 5u);
  export_safetensors(path, std::vector<Tensor>{});  // no tensors at all is a valid file
  EXPECT_TRUE(SafetensorsFile::open(path)->tensors().empty());
}

TEST(SafetensorsExportTest, RefusesWhatCannotBeWritten) {
  test::TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  const auto refused = [&](std::vector<Tensor> tensors, ExportOptions options = {}) {
    try {
      export_safetensors(path, tensors, options);
      ADD_FAILURE() << "exported";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kCheckpoint);
      EXPECT_EQ(e.path(), path);
    }
    EXPECT_TRUE(test::list_names(dir.path()).empty()) << "nothing is written";
  };
  refused({{"a", {1}, {1}}, {"a", {1}, {2}}});
  refused({{"__metadata__", {1}, {1}}});
  refused({{"", {1}, {1}}});
  refused({{"bad\xff", {1}, {1}}});
  refused({{"a", {2}, {1}}});
  ExportOptions bad_metadata;
  bad_metadata.metadata["k"] = "\xc0\x80";  // overlong NUL
  refused({}, bad_metadata);
}

}  // namespace
}  // namespace hsring::checkpoint
