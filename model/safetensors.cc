#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>
#include "common/error.h"
#include "common/regular_file.h"
#include "common/syscheck.h"
#include "model/float_convert.h"

#include "model/json.h"

namespace hsring {

// The header length, and every tensor's bytes, are little-endian; so is every host we run on.
static_assert(std::endian::native == std::endian::little,
              "safetensors reading assumes little-endian");

namespace {

// The safetensors format caps its header at 100 MB; anything larger is garbage.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

uint32_t element_size_of(std::string_view dtype) {
  struct Entry {
    std::string_view name;
    uint32_t size;
  };
  static constexpr Entry kTable[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8},
  };
  for (const Entry& e : kTable)
    if (e.name == dtype) return e.size;
  return 0;
}

}  // namespace

std::string shape_string(std::span<const int64_t> shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  const RegularFileOpen opened = try_open_regular_file(path.string());
  if (opened.fd < 0)
    throw Error(Errc::kModel, "cannot open safetensors file '" + path.string() +
                                  "': " + opened.problem +
                                  (opened.error == 0 ? ": give the path of a regular file" : ""));
  const int fd = opened.fd;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw sys_error(Errc::kModel, err,
                    fmt::format("cannot read safetensors file '{}'", path.string()));
  }
  const auto size = size_t(st.st_size);
  if (size < 8) {
    ::close(fd);
    throw Error(Errc::kModel,
                fmt::format("safetensors file '{}' is {} bytes, too short for its 8-byte header "
                            "length (truncated?)",
                            path.string(), size));
  }
  // MAP_PRIVATE read-only: the weights are copied out once; nothing writes the file.
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_error = map == MAP_FAILED ? errno : 0;
  ::close(fd);  // the mapping keeps the file
  if (map == MAP_FAILED)
    throw sys_error(Errc::kModel, map_error,
                    fmt::format("cannot mmap safetensors file '{}'", path.string()));
  std::unique_ptr<SafetensorsFile> file(
      new SafetensorsFile(path, static_cast<const std::byte*>(map), size));
  file->parse_header();
  return file;
}

SafetensorsFile::SafetensorsFile(std::filesystem::path path, const std::byte* map, size_t size)
    : path_(std::move(path)), map_(map), size_(size) {}

SafetensorsFile::~SafetensorsFile() { ::munmap(const_cast<std::byte*>(map_), size_); }

void SafetensorsFile::fail(const std::string& what) const {
  throw Error(Errc::kModel, "safetensors file '" + path_.string() + "': " + what);
}

void SafetensorsFile::parse_header() {
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | uint8_t(map_[i]);
  if (header_len > size_ - 8)
    fail(fmt::format(
        "header length {} exceeds the {} bytes after it (truncated, or not a safetensors file)",
        header_len, size_ - 8));
  if (header_len > kMaxHeaderBytes || header_len < 2)
    fail(fmt::format("header length {} is implausible (not a safetensors file?)", header_len));
  data_offset_ = 8 + header_len;
  const uint64_t data_size = size_ - data_offset_;

  const std::string_view text(reinterpret_cast<const char*>(map_ + 8), header_len);
  nlohmann::json header;
  try {
    header = parse_json(text, "header");
  } catch (const Error& e) {
    fail(std::string("garbage header: ") + e.what());
  }
  if (!header.is_object()) fail("header is " + std::string(json_kind(header)) + ", not an object");

  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail("__metadata__ must be an object of strings");
      for (const auto& [key, value] : entry.items())
        if (!value.is_string()) fail("__metadata__ entry '" + key + "' is not a string");
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    if (!entry.is_object()) fail(where + " is " + json_kind(entry) + ", not an object");
    for (const auto& [key, unused] : entry.items())
      if (key != "dtype" && key != "shape" && key != "data_offsets")
        fail(where + " has an unknown field '" + key + "'");
    const nlohmann::json* dtype = json_member(entry, "dtype");
    const nlohmann::json* shape = json_member(entry, "shape");
    const nlohmann::json* offsets = json_member(entry, "data_offsets");
    if (!dtype || !shape || !offsets) fail(where + " lacks dtype, shape or data_offsets");

    TensorInfo t;
    t.name = name;
    if (!dtype->is_string()) fail(where + ": dtype is not a string");
    t.dtype = dtype->get_ref<const std::string&>();
    t.element_size = element_size_of(t.dtype);
    if (t.element_size == 0) fail(where + ": unknown dtype " + describe_json(*dtype));

    if (!shape->is_array()) fail(where + ": shape is not an array");
    uint64_t elements = 1;
    for (const nlohmann::json& dim : *shape) {
      if (!dim.is_number() || !json_int(dim) || *json_int(dim) < 0)
        fail(where + ": shape holds " + describe_json(dim) + ", not a non-negative integer");
      const auto d = uint64_t(*json_int(dim));
      if (d != 0 && elements > std::numeric_limits<uint64_t>::max() / t.element_size / d)
        fail(where + ": shape " + describe_json(dim) + " overflows");
      elements *= d;
      t.shape.push_back(int64_t(d));
    }

    if (!offsets->is_array() || offsets->size() != 2)
      fail(where + ": data_offsets must be [begin, end]");
    const nlohmann::json& b = (*offsets)[0];
    const nlohmann::json& e = (*offsets)[1];
    if (!b.is_number() || !json_int(b) || *json_int(b) < 0 || !e.is_number() || !json_int(e) ||
        *json_int(e) < 0)
      fail(where + ": data_offsets must be non-negative integers");
    t.begin = uint64_t(*json_int(b));
    t.end = uint64_t(*json_int(e));
    if (t.end < t.begin)
      fail(fmt::format("{}: data_offsets [{}, {}] end before they begin", where, t.begin, t.end));
    if (t.end > data_size)
      fail(
          fmt::format("{} ends at data byte {} but the file holds only {} data bytes (truncated "
                      "file or offsets out of bounds)",
                      where, t.end, data_size));
    if (t.end - t.begin != elements * t.element_size)
      fail(fmt::format("{}: shape {} of {} needs {} bytes but data_offsets span {}", where,
                       shape_string(t.shape), t.dtype, elements * t.element_size, t.end - t.begin));
    tensors_.push_back(std::move(t));
  }

  // The tensors must tile the data section: an overlap or a gap means a corrupt header.
  std::vector<const TensorInfo*> by_offset;
  for (const TensorInfo& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo* t : by_offset) {
    if (t->begin < covered)
      fail(fmt::format("tensors '{}' and '{}' overlap (data bytes {}..{})", previous->name, t->name,
                       t->begin, covered));
    if (t->begin > covered)
      fail(
          fmt::format("data bytes {}..{} belong to no tensor (corrupt header)", covered, t->begin));
    covered = t->end;
    previous = t;
  }
  if (covered != data_size)
    fail(fmt::format("{} bytes after the last tensor belong to no tensor", data_size - covered));

  std::sort(tensors_.begin(), tensors_.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it =
      std::lower_bound(tensors_.begin(), tensors_.end(), name,
                       [](const TensorInfo& t, std::string_view n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

std::span<const std::byte> SafetensorsFile::bytes(const TensorInfo& tensor) const {
  return {map_ + data_offset_ + tensor.begin, size_t(tensor.end - tensor.begin)};
}

void SafetensorsFile::read_as_float(std::string_view name, std::span<const int64_t> expected_shape,
                                    std::span<float> out) const {
  const std::string where = "tensor '" + std::string(name) + "' in '" + path_.string() + "'";
  check_tensor(name, expected_shape);
  const TensorInfo* t = find(name);
  const std::span<const std::byte> data = bytes(*t);
  const size_t count = data.size() / t->element_size;
  if (count != out.size())  // the shape matched, so only a caller's bad buffer gets here
    throw Error(Errc::kModel,
                fmt::format("{}: output holds {} elements, not {}", where, out.size(), count));
  // memcpy per element: tensors need not be aligned inside the file.
  if (t->dtype == "F32") {
    if (!data.empty()) std::memcpy(out.data(), data.data(), data.size());  // empty: null data()
  } else if (t->dtype == "BF16" || t->dtype == "F16") {
    const bool bf16 = t->dtype == "BF16";
    for (size_t i = 0; i < count; ++i) {
      uint16_t bits;
      std::memcpy(&bits, data.data() + 2 * i, 2);
      out[i] = bf16 ? bf16_to_float(bits) : fp16_to_float(bits);
    }
  } else {
    throw Error(Errc::kModel,
                where + " has dtype " + t->dtype + "; weights must be BF16, F16 or F32");
  }
}

void SafetensorsFile::read_weights(std::string_view name, std::span<const int64_t> expected_shape,
                                   std::span<float> out) const {
  read_as_float(name, expected_shape, out);
  // A NaN or infinite weight makes every output NaN, or silently wrong (an all-NaN target
  // still "matched greedy"): such a file is damaged or its training diverged.
  const auto bad = std::find_if(out.begin(), out.end(), [](float v) { return !std::isfinite(v); });
  if (bad != out.end())
    throw Error(Errc::kModel,
                fmt::format("tensor '{}' in '{}' holds {} at element {}: weights must be finite (a "
                            "damaged file, or a training that diverged); use another checkpoint",
                            name, path_.string(),
                            std::isnan(*bad) ? "NaN"
                            : *bad > 0       ? "+Inf"
                                             : "-Inf",
                            bad - out.begin()));
}

void SafetensorsFile::check_tensor(std::string_view name,
                                   std::span<const int64_t> expected_shape) const {
  const std::string where = "tensor '" + std::string(name) + "' in '" + path_.string() + "'";
  const TensorInfo* t = find(name);
  if (!t) throw Error(Errc::kModel, where + " is missing");
  if (!std::equal(t->shape.begin(), t->shape.end(), expected_shape.begin(), expected_shape.end()))
    throw Error(Errc::kModel, where + " has shape " + shape_string(t->shape) + ", expected " +
                                  shape_string(expected_shape));
}

}  // namespace hsring
