#include "checkpoint/safetensors_export.h"

#include <cstring>
#include <filesystem>
#include <set>

#include "checkpoint/checkpoint_error.h"
#include "checkpoint/checkpoint_files.h"
#include "model/float_convert.h"

namespace hsring::checkpoint {

namespace {

[[noreturn]] void bad_export(const std::string& path, const std::string& what) {
  throw CheckpointError(CheckpointErrc::kBadCheckpoint, path,
                        "cannot export: " + what + " (nothing was written)");
}

// Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF; JSON and the
// safetensors readers in other languages require it.
bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = uint8_t(s[i]);
    size_t extra;
    uint32_t code;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      extra = 1;
      code = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      extra = 2;
      code = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      extra = 3;
      code = c & 0x07;
    } else {
      return false;
    }
    if (s.size() - i <= extra) return false;
    for (size_t k = 1; k <= extra; ++k) {
      const auto d = uint8_t(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      code = (code << 6) | (d & 0x3F);
    }
    if ((extra == 2 && (code < 0x800 || (code >= 0xD800 && code <= 0xDFFF))) ||
        (extra == 3 && (code < 0x10000 || code > 0x10FFFF)))
      return false;
    i += extra + 1;
  }
  return true;
}

void append_json_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (const char ch : s) {
    const auto c = uint8_t(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20) {
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;  // UTF-8 passes through
    }
  }
  out += '"';
}

}  // namespace

void export_safetensors(const std::string& path, std::span<const Tensor> tensors,
                        const ExportOptions& options) {
  const bool bf16 = options.dtype == ExportDtype::kBF16;
  const uint64_t element_size = bf16 ? 2 : 4;
  for (const auto& [key, value] : options.metadata)
    if (!valid_utf8(key) || !valid_utf8(value))
      bad_export(path, "metadata entry '" + key + "' is not UTF-8");

  std::string header = "{";
  if (!options.metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : options.metadata) {
      if (!first) header += ',';
      first = false;
      append_json_string(header, key);
      header += ':';
      append_json_string(header, value);
    }
    header += '}';
  }
  std::set<std::string_view> names;
  uint64_t data_size = 0;
  for (const Tensor& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || !valid_utf8(t.name))
      bad_export(path, "tensor name '" + t.name + "' (empty, reserved or not UTF-8)");
    if (!names.insert(t.name).second) bad_export(path, "tensor '" + t.name + "' appears twice");
    uint64_t count = 1;
    for (const int64_t d : t.shape) {
      if (d < 0 || (d > 0 && count > kMaxTensorElements / uint64_t(d)))
        bad_export(path, "tensor '" + t.name + "' has a negative or huge dimension");
      count *= uint64_t(d);
    }
    if (count != t.data.size())
      bad_export(path, "tensor '" + t.name + "' has " + std::to_string(t.data.size()) +
                           " elements, its shape holds " + std::to_string(count));
    if (header.size() > 1) header += ',';
    append_json_string(header, t.name);
    header += bf16 ? ":{\"dtype\":\"BF16\",\"shape\":[" : ":{\"dtype\":\"F32\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i)
      header += (i ? "," : "") + std::to_string(t.shape[i]);
    const uint64_t end = data_size + count * element_size;
    header += "],\"data_offsets\":[" + std::to_string(data_size) + "," + std::to_string(end) + "]}";
    data_size = end;
  }
  header += '}';
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

  const std::filesystem::path final_path(path);
  std::string dir = final_path.parent_path().string();
  if (dir.empty()) dir = ".";
  AtomicFile file(path, temporary_path(dir, final_path.filename().string()),
                  head.size() + data_size, options.io);
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
