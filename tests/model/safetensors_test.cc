#include "model/safetensors.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "model/float_convert.h"
#include "test_files.h"

namespace hsring {
namespace {

using test::make_tensor;
using test::TestTensor;

class SafetensorsTest : public ::testing::Test {
 protected:
  std::filesystem::path path(const std::string& name = "w.safetensors") { return dir_ / name; }

  // Opens `file` expecting failure; returns the error (and checks it names the file).
  Error open_error(const std::filesystem::path& file) {
    try {
      SafetensorsFile::open(file);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
      return e;
    }
    ADD_FAILURE() << "opened " << file;
    return Error(Errc::kModel, "");
  }

  // Writes `header` and `data_bytes` zero bytes, then expects a kBadFile error mentioning
  // `message`.
  void expect_bad_header(const std::string& header, size_t data_bytes, const std::string& message) {
    test::write_raw(path(), header, std::vector<uint8_t>(data_bytes, 0));
    const Error e = open_error(path());
    EXPECT_EQ(e.code(), Errc::kModel) << header;
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos)
        << "header: " << header << "\nerror: " << e.what();
  }

  test::TempDir dir_;
};

TEST_F(SafetensorsTest, ReadsEachFloatDtype) {
  const std::vector<float> values = {1.5f, -2.0f, 0.333333f, 65504.0f, -0.0f, 1e-3f};
  test::write_safetensors(path(), {make_tensor("a.f32", "F32", {2, 3}, values),
                                   make_tensor("a.bf16", "BF16", {6}, values),
                                   make_tensor("a.f16", "F16", {3, 2}, values)});
  const auto file = SafetensorsFile::open(path());
  ASSERT_EQ(file->tensors().size(), 3u);
  std::vector<float> out(6);
  file->read_as_float("a.f32", std::vector<int64_t>{2, 3}, out);
  EXPECT_EQ(out, values);
  file->read_as_float("a.bf16", std::vector<int64_t>{6}, out);
  for (size_t i = 0; i < values.size(); ++i)
    EXPECT_EQ(out[i], bf16_to_float(float_to_bf16(values[i])));
  file->read_as_float("a.f16", std::vector<int64_t>{3, 2}, out);
  for (size_t i = 0; i < values.size(); ++i)
    EXPECT_EQ(out[i], fp16_to_float(float_to_fp16(values[i])));
  EXPECT_EQ(file->find("a.f16")->dtype, "F16");
  EXPECT_EQ(file->find("nope"), nullptr);
}

TEST_F(SafetensorsTest, ReadsUnalignedTensors) {
  // A 1-byte tensor first pushes the F32 one to an odd offset.
  test::write_safetensors(
      path(), {TestTensor{"a", "U8", {1}, {7}}, make_tensor("b", "F32", {2}, {3.25f, -1.0f})});
  std::vector<float> out(2);
  SafetensorsFile::open(path())->read_as_float("b", std::vector<int64_t>{2}, out);
  EXPECT_EQ(out, (std::vector<float>{3.25f, -1.0f}));
}

TEST_F(SafetensorsTest, WrongShapeDtypeOrMissingTensorNamesTensorAndFile) {
  test::write_safetensors(path(), {make_tensor("w", "F32", {2, 2}, {1, 2, 3, 4}),
                                   TestTensor{"ids", "I64", {1}, std::vector<uint8_t>(8, 0)}});
  const auto file = SafetensorsFile::open(path());
  std::vector<float> out(4);
  const auto error = [&](const std::string& name, std::vector<int64_t> shape) {
    try {
      file->read_as_float(
          name, shape,
          std::span<float>(out.data(), size_t(shape[0] * (shape.size() > 1 ? shape[1] : 1))));
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'" + name + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path().string()), std::string::npos) << e.what();
      return e;
    }
    ADD_FAILURE() << name;
    return Error(Errc::kModel, "");
  };
  const Error shape = error("w", {4, 1});
  EXPECT_EQ(shape.code(), Errc::kModel);
  EXPECT_NE(std::string(shape.what()).find("has shape [2, 2], expected [4, 1]"), std::string::npos);
  const Error dtype = error("ids", {1});
  EXPECT_EQ(dtype.code(), Errc::kModel);
  EXPECT_NE(std::string(dtype.what()).find("dtype I64"), std::string::npos);
  EXPECT_EQ(error("absent", {1}).code(), Errc::kModel);
}

TEST_F(SafetensorsTest, MissingFile) {
  EXPECT_EQ(open_error(path("absent.safetensors")).code(), Errc::kModel);
}

TEST_F(SafetensorsTest, TruncatedFiles) {
  const std::vector<TestTensor> tensors = {make_tensor("x", "F32", {4}, {1, 2, 3, 4})};
  test::write_safetensors(path(), tensors);
  const auto full = std::filesystem::file_size(path());
  // Cut inside the data, inside the header, inside the length prefix, and empty.
  for (const uint64_t keep : {full - 1, uint64_t(20), uint64_t(5), uint64_t(0)}) {
    std::filesystem::resize_file(path(), keep);
    const Error e = open_error(path());
    EXPECT_EQ(e.code(), Errc::kModel) << keep;
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
    test::write_safetensors(path(), tensors);
  }
}

TEST_F(SafetensorsTest, OffsetsOutOfBoundsOverlapsAndGaps) {
  const std::string f32x2 = R"("dtype":"F32","shape":[2],"data_offsets":)";
  expect_bad_header("{\"a\":{" + f32x2 + "[0,8]},\"b\":{" + f32x2 + "[8,16]}}", 12,
                    "tensor 'b' ends at data byte 16 but the file holds only 12");
  expect_bad_header("{\"a\":{" + f32x2 + "[0,8]},\"b\":{" + f32x2 + "[4,12]}}", 12,
                    "tensors 'a' and 'b' overlap");
  expect_bad_header("{\"a\":{" + f32x2 + "[0,8]},\"b\":{" + f32x2 + "[12,20]}}", 20,
                    "data bytes 8..12 belong to no tensor");
  expect_bad_header("{\"a\":{" + f32x2 + "[0,8]}}", 12, "4 bytes after the last tensor");
  expect_bad_header("{\"a\":{" + f32x2 + "[8,0]}}", 8, "end before they begin");
  expect_bad_header("{\"a\":{" + f32x2 + "[0,4]}}", 4, "needs 8 bytes but data_offsets span 4");
  expect_bad_header("{\"a\":{" + f32x2 + "[-1,7]}}", 8, "non-negative integers");
  expect_bad_header("{\"a\":{" + f32x2 + "[0]}}", 8, "data_offsets must be [begin, end]");
}

TEST_F(SafetensorsTest, GarbageHeaders) {
  expect_bad_header("{\"a\":", 0, "garbage header");
  expect_bad_header("not json at all", 0, "garbage header");
  expect_bad_header("[1, 2]", 0, "not an object");
  expect_bad_header("{\"a\": 3}", 0, "tensor 'a' is a number, not an object");
  expect_bad_header(R"({"a":{"dtype":"F32","shape":[1]}})", 4,
                    "lacks dtype, shape or data_offsets");
  expect_bad_header(R"({"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,4]}})", 4,
                    "unknown dtype \"Q4\"");
  expect_bad_header(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4,
                    "not a non-negative integer");
  expect_bad_header(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4,
                    "not a non-negative integer");
  expect_bad_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", 4,
                    "unknown field 'x'");
  const std::string entry = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  expect_bad_header("{\"a\":" + entry + ",\"a\":" + entry + "}", 4, "duplicate key");
  expect_bad_header(R"({"__metadata__":{"k":1}})", 0, "__metadata__ entry 'k' is not a string");
  expect_bad_header(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})",
                    4, "overflows");
  // A length prefix pointing far past the end of the file.
  test::write_raw(path(), "{}", {}, int64_t(1) << 40);
  EXPECT_NE(std::string(open_error(path()).what()).find("exceeds"), std::string::npos);
}

TEST_F(SafetensorsTest, AcceptsPaddedHeaderAndEmptyTensor) {
  // Writers pad the header with spaces to align the data; zero-element tensors are legal.
  test::write_raw(path(),
                  R"({"e":{"dtype":"F32","shape":[0, 3],"data_offsets":[0,0]},)"
                  R"("x":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]}}    )",
                  {0x80, 0x3F});
  const auto file = SafetensorsFile::open(path());
  std::vector<float> out(1);
  file->read_as_float("x", std::vector<int64_t>{1}, out);
  EXPECT_EQ(out[0], 1.0f);
  std::vector<float> none;
  file->read_as_float("e", std::vector<int64_t>{0, 3}, none);
}

}  // namespace
}  // namespace hsring
