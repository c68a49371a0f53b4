#include "test_files.h"
#include "common/error.h"

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "model/float_convert.h"

namespace hsring::test {

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  path_ =
      std::filesystem::temp_directory_path() / ("hsring-model-test-" + std::to_string(::getpid()) +
                                                "-" + std::to_string(counter.fetch_add(1)));
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::vector<uint8_t> encode(const std::vector<float>& values, const std::string& dtype) {
  std::vector<uint8_t> out;
  for (float v : values) {
    if (dtype == "F32") {
      uint8_t b[4];
      std::memcpy(b, &v, 4);
      out.insert(out.end(), b, b + 4);
    } else if (dtype == "BF16" || dtype == "F16") {
      const uint16_t bits = dtype == "BF16" ? float_to_bf16(v) : float_to_fp16(v);
      out.push_back(uint8_t(bits & 0xFF));
      out.push_back(uint8_t(bits >> 8));
    } else {
      throw Error(Errc::kUsage, "encode: dtype " + dtype);
    }
  }
  return out;
}

TestTensor make_tensor(const std::string& name, const std::string& dtype,
                       std::vector<int64_t> shape, const std::vector<float>& values) {
  return {name, dtype, std::move(shape), encode(values, dtype)};
}

std::string header_for(const std::vector<TestTensor>& tensors) {
  std::string h = "{\"__metadata__\":{\"format\":\"pt\"}";
  size_t offset = 0;
  for (const TestTensor& t : tensors) {
    h += ",\"" + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) h += (i ? "," : "") + std::to_string(t.shape[i]);
    h += "],\"data_offsets\":[" + std::to_string(offset) + "," +
         std::to_string(offset + t.bytes.size()) + "]}";
    offset += t.bytes.size();
  }
  return h + "}";
}

void write_raw(const std::filesystem::path& path, const std::string& header,
               const std::vector<uint8_t>& data, int64_t header_len) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const uint64_t len = header_len < 0 ? header.size() : uint64_t(header_len);
  for (int i = 0; i < 8; ++i) out.put(char((len >> (8 * i)) & 0xFF));
  out.write(header.data(), std::streamsize(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

void write_safetensors(const std::filesystem::path& path, const std::vector<TestTensor>& tensors) {
  std::vector<uint8_t> data;
  for (const TestTensor& t : tensors) data.insert(data.end(), t.bytes.begin(), t.bytes.end());
  write_raw(path, header_for(tensors), data);
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

std::string config_json(const ModelConfig& c) {
  return "{\n  \"architectures\": [\"" +
         std::string(c.model_type == "qwen3" ? "Qwen3ForCausalLM" : "LlamaForCausalLM") +
         "\"],\n  \"model_type\": \"" + c.model_type +
         "\",\n  \"hidden_size\": " + std::to_string(c.hidden_size) +
         ",\n  \"intermediate_size\": " + std::to_string(c.intermediate_size) +
         ",\n  \"num_hidden_layers\": " + std::to_string(c.num_layers) +
         ",\n  \"num_attention_heads\": " + std::to_string(c.num_heads) +
         ",\n  \"num_key_value_heads\": " + std::to_string(c.num_kv_heads) +
         ",\n  \"head_dim\": " + std::to_string(c.head_dim) +
         ",\n  \"vocab_size\": " + std::to_string(c.vocab_size) +
         ",\n  \"rope_theta\": " + std::to_string(c.rope_theta) +
         ",\n  \"rms_norm_eps\": 1e-06,\n  \"hidden_act\": \"silu\",\n  \"attention_bias\": "
         "false," +
         "\n  \"rope_scaling\": null,\n  \"tie_word_embeddings\": " +
         (c.tie_embeddings ? "true" : "false") + ",\n  \"torch_dtype\": \"bfloat16\"\n}\n";
}

void write_model_folder(const std::filesystem::path& folder, const ModelConfig& config,
                        const ModelWeights& weights, const std::string& dtype, int shards) {
  std::filesystem::create_directories(folder);
  write_text(folder / "config.json", config_json(config));
  std::vector<TestTensor> all;
  for_each_weight(config, weights,
                  [&](const std::string& name, const std::vector<int64_t>& shape,
                      const std::vector<float>& values) {
                    all.push_back(make_tensor(name, dtype, shape, values));
                  });
  if (shards == 1) {
    write_safetensors(folder / "model.safetensors", all);
    return;
  }
  std::vector<std::vector<TestTensor>> files(static_cast<size_t>(shards));
  for (size_t i = 0; i < all.size(); ++i)
    files[i * size_t(shards) / all.size()].push_back(std::move(all[i]));
  std::string index = "{\"metadata\":{\"total_size\":0},\"weight_map\":{";
  bool first = true;
  for (int s = 0; s < shards; ++s) {
    const std::string file =
        "model-0000" + std::to_string(s + 1) + "-of-0000" + std::to_string(shards) + ".safetensors";
    write_safetensors(folder / file, files[size_t(s)]);
    for (const TestTensor& t : files[size_t(s)]) {
      index += std::string(first ? "" : ",") + "\n\"" + t.name + "\":\"" + file + "\"";
      first = false;
    }
  }
  write_text(folder / "model.safetensors.index.json", index + "}}\n");
}

}  // namespace hsring::test
