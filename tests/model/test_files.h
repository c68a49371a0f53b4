// Test helpers: a temporary folder removed afterwards, and writers of safetensors files
// (well-formed, or with any header the test wants) and of model folders.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "model/model_weights.h"

namespace hsring::test {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

struct TestTensor {
  std::string name;
  std::string dtype;  // "F32", "BF16", "F16" or anything else (raw bytes)
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// Values encoded as `dtype` ("F32", "BF16", "F16"), little-endian.
std::vector<uint8_t> encode(const std::vector<float>& values, const std::string& dtype);
TestTensor make_tensor(const std::string& name, const std::string& dtype,
                       std::vector<int64_t> shape, const std::vector<float>& values);

// The header a correct writer would emit for `tensors`, stored back to back in order.
std::string header_for(const std::vector<TestTensor>& tensors);
// Writes 8-byte length + header + data; `header_len` overrides the length field.
void write_raw(const std::filesystem::path& path, const std::string& header,
               const std::vector<uint8_t>& data, int64_t header_len = -1);
void write_safetensors(const std::filesystem::path& path, const std::vector<TestTensor>& tensors);
void write_text(const std::filesystem::path& path, const std::string& text);

// A Hugging Face style config.json for `config`.
std::string config_json(const ModelConfig& config);
// Writes config.json and the weights as one file (shards == 1) or `shards` files plus
// model.safetensors.index.json.
void write_model_folder(const std::filesystem::path& folder, const ModelConfig& config,
                        const ModelWeights& weights, const std::string& dtype, int shards = 1);

}  // namespace hsring::test
