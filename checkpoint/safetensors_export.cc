#include "checkpoint/safetensors_export.h"

#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_files.h"
#include "common/error.h"
#include "model/float_convert.h"

namespace hsring::checkpoint {

namespace {

[[noreturn]] void bad_export(const std::string& path, const std::string& what) {
  throw Error(Errc::kCheckpoint, path, "cannot export: " + what + " (nothing was written)");
}

// Strict UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF), which JSON and
// the safetensors readers in other languages require: nlohmann's strict dump checks it.
bool valid_utf8(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

}  // namespace

void export_safetensors(const std::string& path, std::span<const Tensor> tensors,
                        const ExportOptions& options) {
  const bool bf16 = options.dtype == ExportDtype::kBF16;
  const uint64_t element_size = bf16 ? 2 : 4;
  for (const auto& [key, value] : options.metadata)
    if (!valid_utf8(key) || !valid_utf8(value))
      bad_export(path, "metadata entry '" + key + "' is not UTF-8");

  nlohmann::json json_header = nlohmann::json::object();
  if (!options.metadata.empty()) {
    nlohmann::json& metadata = json_header["__metadata__"];
    for (const auto& [key, value] : options.metadata) metadata[key] = value;
  }
  uint64_t data_size = 0;
  for (const Tensor& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || !valid_utf8(t.name))
      bad_export(path, "tensor name '" + t.name + "' (empty, reserved or not UTF-8)");
    if (json_header.contains(t.name)) bad_export(path, "tensor '" + t.name + "' appears twice");
    uint64_t count = 1;
    for (const int64_t d : t.shape) {
      if (d < 0 || (d > 0 && count > kMaxTensorElements / uint64_t(d)))
        bad_export(path, "tensor '" + t.name + "' has a negative or huge dimension");
      count *= uint64_t(d);
    }
    if (count != t.data.size())
      bad_export(path, fmt::format("tensor '{}' has {} elements, its shape holds {}", t.name,
                                   t.data.size(), count));
    const uint64_t end = data_size + count * element_size;
    json_header[t.name] = {
        {"dtype", bf16 ? "BF16" : "F32"}, {"shape", t.shape}, {"data_offsets", {data_size, end}}};
    data_size = end;
  }
  std::string header = json_header.dump();
  // Spaces pad the header so the data starts 8-byte aligned, as the reference writer does.
  header.resize((header.size() + 7) / 8 * 8, ' ');

  // Every buffer below is declared before `file`, so it outlives the writes in flight.
  std::vector<std::byte> head(8 + header.size());
  const uint64_t header_size = header.size();
  for (int i = 0; i < 8; ++i) head[i] = std::byte(uint8_t(header_size >> (8 * i)));
  std::memcpy(head.data() + 8, header.data(), header.size());
  std::vector<uint16_t> narrowed;
  if (bf16) {
    narrowed.reserve(data_size / 2);
    for (const Tensor& t : tensors)
      for (const float v : t.data) narrowed.push_back(float_to_bf16(v));
  }

  AtomicFile file(path, head.size() + data_size, options.io);
  file.write(head.data(), head.size(), 0);
  if (bf16) {
    file.write(narrowed.data(), narrowed.size() * 2, head.size());
  } else {
    uint64_t offset = head.size();
    for (const Tensor& t : tensors) {
      file.write(t.data.data(), t.data.size() * 4, offset);
      offset += t.data.size() * 4;
    }
  }
  file.commit();
}

}  // namespace hsring::checkpoint
