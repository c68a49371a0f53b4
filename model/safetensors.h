// A validated, memory-mapped safetensors file: an 8-byte little-endian header length, a
// JSON header of {name: {dtype, shape, data_offsets}}, then the tensors' bytes. Every
// header field is checked before any tensor byte is read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hsring {

struct TensorInfo {
  std::string name;
  std::string dtype;          // as written: "BF16", "F16", "F32", "I64", ...
  uint32_t element_size = 0;  // bytes
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // data_offsets, relative to the data section
  uint64_t end = 0;
};

// "[4096, 128]": a shape as every error message writes it (model/ and checkpoint/ alike).
std::string shape_string(std::span<const int64_t> shape);

class SafetensorsFile {
 public:
  // Maps and validates `path`: header length within the file, header strict JSON, each
  // entry a known dtype with a shape whose byte size matches its offsets, offsets inside
  // the data section, tensors tiling the data with no overlap and no gap. Throws
  // Error: kIo (missing or unreadable file), kBadFile (anything else), naming the file.
  static std::unique_ptr<SafetensorsFile> open(const std::filesystem::path& path);

  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // nullptr when the file holds no tensor of that name.
  const TensorInfo* find(std::string_view name) const;
  // The tensor's bytes inside the mapping (no alignment promised).
  std::span<const std::byte> bytes(const TensorInfo& tensor) const;

  // Throws Error: kMissingTensor when tensor `name` is absent, kBadTensor when its shape
  // differs from `expected_shape`. Reads no tensor byte: a caller checks every tensor this
  // way before allocating for any, so a config's sizes are bounded by what the file holds.
  void check_tensor(std::string_view name, std::span<const int64_t> expected_shape) const;

  // Converts tensor `name` (BF16, F16 or F32) to fp32 into `out`, which holds the element
  // count of `expected_shape`. Throws Error: kMissingTensor when absent, kBadTensor when
  // its shape differs from `expected_shape` or its dtype is not a float one.
  void read_as_float(std::string_view name, std::span<const int64_t> expected_shape,
                     std::span<float> out) const;
  // read_as_float for a model's weights, which must be finite: also throws kBadTensor for a
  // NaN or an infinity, naming the tensor, the value and its element.
  void read_weights(std::string_view name, std::span<const int64_t> expected_shape,
                    std::span<float> out) const;

 private:
  SafetensorsFile(std::filesystem::path path, const std::byte* map, size_t size);
  void parse_header();
  [[noreturn]] void fail(const std::string& what) const;

  std::filesystem::path path_;
  const std::byte* map_;
  size_t size_;
  uint64_t data_offset_ = 0;         // first byte of the data section in the file
  std::vector<TensorInfo> tensors_;  // sorted by name
};

}  // namespace hsring
