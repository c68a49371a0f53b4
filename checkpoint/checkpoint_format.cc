#include "checkpoint/checkpoint_format.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <set>

#include <fmt/format.h>

#include "common/crc32.h"
#include "common/error.h"
#include "common/file_header.h"
#include "model/safetensors.h"

namespace hsring::checkpoint {

static_assert(std::endian::native == std::endian::little, "checkpoints are little-endian on disk");
static_assert(sizeof(float) == 4);
static_assert(kHeaderSize == kFileHeaderSize && kFieldVersion == kFileVersionOffset &&
              kFieldHeaderCrc == kFileHeaderCrcOffset);

namespace {

// Sizes of the fixed parts of table entries; the variable parts (key and value, or dims
// and name) follow them.
constexpr uint64_t kMetadataEntryFixed = 8;  // u32 key length, u32 value length
constexpr uint64_t kTensorEntryFixed = 32;   // u32 name length, dtype, rank, reserved;
                                             // u64 data offset, element count

constexpr FileFormat kCheckpointFormat{Errc::kCheckpoint,
                                       kCheckpointMagic,
                                       "an hsring checkpoint",
                                       "; move the file out of the checkpoint directory",
                                       "the write of this checkpoint was cut short",
                                       ": the header is damaged"};

template <class T>
void append(std::vector<std::byte>& out, T value) {
  const size_t at = out.size();
  out.resize(at + sizeof value);
  store_le(out.data() + at, value);
}

void append_bytes(std::vector<std::byte>& out, const std::string& s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  out.insert(out.end(), p, p + s.size());
}

// A name for error messages: printable ASCII kept, anything else escaped, long names cut.
std::string printable(std::string_view name) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < name.size() && i < 80; ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      s += char(c);
    } else {
      s += "\\x";
      s += kHex[c >> 4];
      s += kHex[c & 15];
    }
  }
  if (name.size() > 80) s += "...";
  return s;
}

// Elements a shape holds, or nullopt when a dimension is negative or the count exceeds
// kMaxTensorElements (checked before each multiplication, so nothing overflows).
std::optional<uint64_t> element_count_of(const std::vector<int64_t>& shape) {
  uint64_t count = 1;
  bool zero = false;
  for (const int64_t d : shape) {
    if (d < 0 || uint64_t(d) > kMaxTensorElements) return std::nullopt;
    if (d == 0) zero = true;
    if (!zero && count > kMaxTensorElements / uint64_t(d)) return std::nullopt;
    if (!zero) count *= uint64_t(d);
  }
  return zero ? 0 : count;
}

[[noreturn]] void fail(Errc code, const std::string& path, uint64_t offset,
                       const std::string& what) {
  throw Error(code, path, offset, what);
}

[[noreturn]] void bad_value(uint64_t step, const std::string& what) {
  throw Error(Errc::kCheckpoint, fmt::format("checkpoint of step {}", step),
              what + " (a bug in the caller: fix the checkpoint before writing it)");
}

}  // namespace

const Tensor* Checkpoint::find(std::string_view name) const {
  for (const Tensor& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

void Checkpoint::set_u64(const std::string& key, uint64_t value) {
  metadata[key] = fmt::format("{}", value);
}

std::optional<uint64_t> Checkpoint::get_u64(const std::string& key) const {
  const auto it = metadata.find(key);
  if (it == metadata.end()) return std::nullopt;
  const std::string& text = it->second;
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    throw Error(Errc::kCheckpoint, fmt::format("checkpoint of step {}", step),
                fmt::format("metadata '{}' is \"{}\", not a uint64 in decimal", printable(key),
                            printable(text)));
  return value;
}

bool bit_identical(const Checkpoint& a, const Checkpoint& b) {
  if (a.step != b.step || a.metadata != b.metadata || a.tensors.size() != b.tensors.size())
    return false;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const Tensor& x = a.tensors[i];
    const Tensor& y = b.tensors[i];
    if (x.name != y.name || x.shape != y.shape || x.data.size() != y.data.size()) return false;
    if (!x.data.empty() &&
        std::memcmp(x.data.data(), y.data.data(), x.data.size() * sizeof(float)) != 0)
      return false;
  }
  return true;
}

uint64_t CheckpointHeader::data_offset() const { return align_data(kHeaderSize + table_size); }

// ---- Encoding ----

std::array<std::byte, kHeaderSize> encode_header(const CheckpointHeader& h) {
  std::array<std::byte, kHeaderSize> out{};
  std::memcpy(out.data(), kCheckpointMagic.data(), kCheckpointMagic.size());
  store_le(out.data() + kFieldVersion, h.version);
  store_le(out.data() + kFieldHeaderSize, kHeaderSize);
  store_le(out.data() + kFieldFlags, h.flags);
  store_le(out.data() + kFieldMetadataCount, h.metadata_count);
  store_le(out.data() + kFieldTensorCount, h.tensor_count);
  store_le(out.data() + kFieldTableCrc, h.table_crc);
  store_le(out.data() + kFieldStep, h.step);
  store_le(out.data() + kFieldTableSize, h.table_size);
  store_le(out.data() + kFieldFileSize, h.file_size);
  store_le(out.data() + kFieldHeaderCrc, crc32(out.data(), kFieldHeaderCrc));
  return out;
}

std::array<std::byte, kFooterSize> encode_footer(uint32_t crc_before_footer) {
  std::array<std::byte, kFooterSize> out{};
  std::memcpy(out.data(), kFooterMagic.data(), kFooterMagic.size());
  // Bytes 8..11 are reserved zeros; the CRC continues over them and the magic.
  store_le(out.data() + 12, crc32_update(crc_before_footer, out.data(), 12));
  return out;
}

CheckpointPlan plan_checkpoint(const Checkpoint& c) {
  if (c.metadata.size() > kMaxEntries)
    bad_value(c.step,
              fmt::format("{} metadata entries, at most {}", c.metadata.size(), kMaxEntries));
  if (c.tensors.size() > kMaxEntries)
    bad_value(c.step, fmt::format("{} tensors, at most {}", c.tensors.size(), kMaxEntries));
  std::vector<std::byte> table;
  for (const auto& [key, value] : c.metadata) {
    if (key.empty() || key.size() > kMaxNameBytes)
      bad_value(c.step, fmt::format("metadata key '{}' has {} bytes (1 to {} allowed)",
                                    printable(key), key.size(), kMaxNameBytes));
    if (value.size() > kMaxValueBytes)
      bad_value(c.step, fmt::format("metadata '{}' has a value of {} bytes, at most {}",
                                    printable(key), value.size(), kMaxValueBytes));
    append(table, uint32_t(key.size()));
    append(table, uint32_t(value.size()));
    append_bytes(table, key);
    append_bytes(table, value);
    if (table.size() > kMaxTableBytes) bad_value(c.step, "metadata larger than 1 GiB");
  }

  // The table needs the data offsets and the offsets need the table's size: size first.
  uint64_t table_size = table.size();
  for (const Tensor& t : c.tensors)
    table_size += kTensorEntryFixed + 8 * t.shape.size() + t.name.size();
  if (table_size > kMaxTableBytes) bad_value(c.step, "entry table larger than 1 GiB");

  CheckpointPlan plan;
  std::set<std::string_view> names;
  uint64_t end = kHeaderSize + table_size;
  for (const Tensor& t : c.tensors) {
    const std::string what = fmt::format("tensor '{}'", printable(t.name));
    if (t.name.empty() || t.name.size() > kMaxNameBytes)
      bad_value(c.step, fmt::format("{} has a name of {} bytes (1 to {} allowed)", what,
                                    t.name.size(), kMaxNameBytes));
    if (!names.insert(t.name).second) bad_value(c.step, what + " appears twice");
    if (t.shape.size() > kMaxRank)
      bad_value(c.step, fmt::format("{} has rank {}, at most {}", what, t.shape.size(), kMaxRank));
    const std::optional<uint64_t> count = element_count_of(t.shape);
    if (!count)
      bad_value(c.step, fmt::format("{} has shape {}: a negative dimension, or more than 2^40 "
                                    "elements",
                                    what, shape_string(t.shape)));
    if (*count != t.data.size())
      bad_value(c.step, fmt::format("{} has {} elements but its shape {} holds {}", what,
                                    t.data.size(), shape_string(t.shape), *count));
    const uint64_t offset = align_data(end);
    plan.tensor_offsets.push_back(offset);
    end = offset + *count * sizeof(float);
    if (end > kMaxFileBytes) bad_value(c.step, "tensors larger than 2^50 bytes");
    append(table, uint32_t(t.name.size()));
    append(table, kDtypeF32);
    append(table, uint32_t(t.shape.size()));
    append(table, uint32_t{0});
    append(table, offset);
    append(table, *count);
    for (const int64_t d : t.shape) append(table, d);
    append_bytes(table, t.name);
  }
  plan.file_size = align_data(end) + kFooterSize;

  CheckpointHeader h;
  h.metadata_count = uint32_t(c.metadata.size());
  h.tensor_count = uint32_t(c.tensors.size());
  h.table_crc = crc32(table.data(), table.size());
  h.step = c.step;
  h.table_size = table.size();
  h.file_size = plan.file_size;
  const auto header = encode_header(h);
  plan.head.reserve(h.data_offset());
  plan.head.assign(header.begin(), header.end());
  plan.head.insert(plan.head.end(), table.begin(), table.end());
  plan.head.resize(h.data_offset(), std::byte{0});
  return plan;
}

std::vector<std::byte> encode_checkpoint(const Checkpoint& c) {
  const CheckpointPlan plan = plan_checkpoint(c);
  std::vector<std::byte> out(plan.file_size, std::byte{0});
  std::memcpy(out.data(), plan.head.data(), plan.head.size());
  for (size_t i = 0; i < c.tensors.size(); ++i)
    if (!c.tensors[i].data.empty())
      std::memcpy(out.data() + plan.tensor_offsets[i], c.tensors[i].data.data(),
                  c.tensors[i].data.size() * sizeof(float));
  const uint64_t footer_offset = plan.file_size - kFooterSize;
  const auto footer = encode_footer(crc32(out.data(), footer_offset));
  std::memcpy(out.data() + footer_offset, footer.data(), footer.size());
  return out;
}

// ---- Decoding ----

CheckpointHeader decode_header(const std::byte* bytes, size_t available, uint64_t file_size,
                               const std::string& path) {
  CheckpointHeader h;
  h.version = check_file_magic(kCheckpointFormat, bytes, available, path);
  if (h.version != kCheckpointVersion)
    fail(Errc::kCheckpoint, path, kFieldVersion,
         fmt::format("format version {}, this build reads version {} (written by another hsring "
                     "release?)",
                     h.version, kCheckpointVersion));
  check_file_header_crc(kCheckpointFormat, bytes, path);

  const uint32_t header_size = load_le<uint32_t>(bytes + kFieldHeaderSize);
  h.flags = load_le<uint32_t>(bytes + kFieldFlags);
  h.metadata_count = load_le<uint32_t>(bytes + kFieldMetadataCount);
  h.tensor_count = load_le<uint32_t>(bytes + kFieldTensorCount);
  h.table_crc = load_le<uint32_t>(bytes + kFieldTableCrc);
  h.step = load_le<uint64_t>(bytes + kFieldStep);
  h.table_size = load_le<uint64_t>(bytes + kFieldTableSize);
  h.file_size = load_le<uint64_t>(bytes + kFieldFileSize);

  if (header_size != kHeaderSize)
    fail(Errc::kCheckpoint, path, kFieldHeaderSize,
         fmt::format("header size {}, version 1 has 64", header_size));
  if (h.flags != 0)
    fail(Errc::kCheckpoint, path, kFieldFlags,
         fmt::format("flags {}: version 1 defines none", h.flags));
  if (h.metadata_count > kMaxEntries)
    fail(Errc::kCheckpoint, path, kFieldMetadataCount, "impossible metadata count");
  if (h.tensor_count > kMaxEntries)
    fail(Errc::kCheckpoint, path, kFieldTensorCount, "impossible tensor count");
  if (h.table_size > kMaxTableBytes ||
      h.table_size < kMetadataEntryFixed * h.metadata_count + kTensorEntryFixed * h.tensor_count)
    fail(Errc::kCheckpoint, path, kFieldTableSize,
         fmt::format("table size {} impossible for {} metadata and {} tensor entries", h.table_size,
                     h.metadata_count, h.tensor_count));
  if (h.file_size > kMaxFileBytes || h.file_size < h.data_offset() + kFooterSize ||
      (h.file_size - kFooterSize) % kDataAlignment != 0)
    fail(Errc::kCheckpoint, path, kFieldFileSize,
         fmt::format("impossible file size {}", h.file_size));
  if (load_le<uint32_t>(bytes + kFieldReserved) != 0)
    fail(Errc::kCheckpoint, path, kFieldReserved, "reserved bytes not zero");

  check_file_size(kCheckpointFormat, file_size, h.file_size, path);
  return h;
}

CheckpointTable decode_table(const std::byte* bytes, const CheckpointHeader& h,
                             const std::string& path) {
  const uint64_t base = h.table_offset();
  if (crc32(bytes, h.table_size) != h.table_crc)
    fail(Errc::kCheckpoint, path, base, "entry table checksum mismatch: the table is damaged");
  CheckpointTable table;
  uint64_t at = 0;  // position inside the table
  // Every variable-size read is bounds-checked against the table size first.
  const auto need = [&](uint64_t size, const std::string& what) {
    if (size > h.table_size - at)
      fail(Errc::kCheckpoint, path, base + at,
           fmt::format("{} runs past the end of the table ({} bytes)", what, h.table_size));
  };
  const auto text = [&](uint64_t size) {
    std::string s(reinterpret_cast<const char*>(bytes + at), size);
    at += size;
    return s;
  };

  for (uint32_t i = 0; i < h.metadata_count; ++i) {
    const std::string what = fmt::format("metadata entry {}", i);
    const uint64_t entry = at;
    need(kMetadataEntryFixed, what);
    const uint32_t key_size = load_le<uint32_t>(bytes + at);
    const uint32_t value_size = load_le<uint32_t>(bytes + at + 4);
    if (key_size == 0 || key_size > kMaxNameBytes)
      fail(Errc::kCheckpoint, path, base + at,
           fmt::format("{}: key of {} bytes (1 to {} allowed)", what, key_size, kMaxNameBytes));
    if (value_size > kMaxValueBytes)
      fail(Errc::kCheckpoint, path, base + at + 4,
           fmt::format("{}: value of {} bytes (at most {})", what, value_size, kMaxValueBytes));
    at += kMetadataEntryFixed;
    need(uint64_t(key_size) + value_size, what);
    std::string key = text(key_size);
    std::string value = text(value_size);
    // Strictly increasing keys make the encoding canonical and the keys unique.
    if (!table.metadata.empty() && !(table.metadata.rbegin()->first < key))
      fail(Errc::kCheckpoint, path, base + entry,
           fmt::format("{}: key '{}' is not after '{}' (keys are unique, in increasing byte "
                       "order)",
                       what, printable(key), printable(table.metadata.rbegin()->first)));
    table.metadata.emplace_hint(table.metadata.end(), std::move(key), std::move(value));
  }

  std::set<std::string> names;
  uint64_t end = h.data_offset();  // where the previous region ended
  for (uint32_t i = 0; i < h.tensor_count; ++i) {
    std::string what = fmt::format("tensor entry {}", i);
    need(kTensorEntryFixed, what);
    const uint64_t entry = base + at;
    const uint32_t name_size = load_le<uint32_t>(bytes + at);
    const uint32_t dtype = load_le<uint32_t>(bytes + at + 4);
    const uint32_t rank = load_le<uint32_t>(bytes + at + 8);
    const uint32_t reserved = load_le<uint32_t>(bytes + at + 12);
    TensorEntry t;
    t.offset = load_le<uint64_t>(bytes + at + 16);
    t.element_count = load_le<uint64_t>(bytes + at + 24);
    if (name_size == 0 || name_size > kMaxNameBytes)
      fail(Errc::kCheckpoint, path, entry,
           fmt::format("{}: name of {} bytes (1 to {} allowed)", what, name_size, kMaxNameBytes));
    if (dtype != kDtypeF32)
      fail(Errc::kCheckpoint, path, entry + 4,
           fmt::format("{}: dtype {} (version 1 has only 1, fp32)", what, dtype));
    if (rank > kMaxRank)
      fail(Errc::kCheckpoint, path, entry + 8,
           fmt::format("{}: rank {}, at most {}", what, rank, kMaxRank));
    if (reserved != 0)
      fail(Errc::kCheckpoint, path, entry + 12, what + ": reserved bytes not zero");
    at += kTensorEntryFixed;
    need(8ull * rank + name_size, what);
    for (uint32_t d = 0; d < rank; ++d) {
      t.shape.push_back(load_le<int64_t>(bytes + at));
      at += 8;
    }
    t.name = text(name_size);
    what += fmt::format(" '{}'", printable(t.name));
    if (!names.insert(t.name).second)
      fail(Errc::kCheckpoint, path, entry, what + ": the name appears twice");
    const std::optional<uint64_t> count = element_count_of(t.shape);
    if (!count || *count != t.element_count)
      fail(Errc::kCheckpoint, path, entry + 24,
           fmt::format("{}: element count {} does not match its shape {}", what, t.element_count,
                       shape_string(t.shape)));
    // Tensors lie back to back in table order, each at the next 64-byte boundary.
    if (t.offset != align_data(end))
      fail(Errc::kCheckpoint, path, entry + 16,
           fmt::format("{}: data offset {}, expected {}", what, t.offset, align_data(end)));
    if (t.byte_size() > h.footer_offset() - t.offset)
      fail(Errc::kCheckpoint, path, entry + 24,
           fmt::format("{}: its {} bytes at {} run past the footer at {}", what, t.byte_size(),
                       t.offset, h.footer_offset()));
    end = t.offset + t.byte_size();
    table.tensors.push_back(std::move(t));
  }
  if (at != h.table_size)
    fail(Errc::kCheckpoint, path, base + at,
         fmt::format("{} table bytes after the last entry", h.table_size - at));
  if (align_data(end) != h.footer_offset())
    fail(Errc::kCheckpoint, path, kFieldFileSize,
         fmt::format("file size {} does not match the tensors, which end at {}", h.file_size, end));
  return table;
}

void check_padding(const std::byte* bytes, uint64_t size, uint64_t offset,
                   const std::string& path) {
  for (uint64_t i = 0; i < size; ++i)
    if (bytes[i] != std::byte{0})
      fail(Errc::kCheckpoint, path, offset + i, "padding byte not zero");
}

void check_footer(const std::byte* footer, uint32_t crc_before_footer, const CheckpointHeader& h,
                  const std::string& path) {
  const uint64_t at = h.footer_offset();
  // The CRC first: a damaged footer is as likely as damage anywhere else.
  const uint32_t crc = crc32_update(crc_before_footer, footer, 12);
  if (crc != load_le<uint32_t>(footer + 12))
    fail(Errc::kCheckpoint, path, at + 12,
         "file checksum mismatch: some byte of the file is damaged (disk or memory corruption, "
         "or a write that never reached the disk)");
  for (size_t i = 0; i < kFooterMagic.size(); ++i)
    if (footer[i] != std::byte(kFooterMagic[i]))
      fail(Errc::kCheckpoint, path, at + i, "footer magic \"HSRCKEND\" expected");
  if (load_le<uint32_t>(footer + 8) != 0)
    fail(Errc::kCheckpoint, path, at + 8, "reserved footer bytes not zero");
}

Checkpoint decode_checkpoint(std::span<const std::byte> file, const std::string& path) {
  const CheckpointHeader h = decode_header(file.data(), file.size(), file.size(), path);
  CheckpointTable table = decode_table(file.data() + h.table_offset(), h, path);
  check_footer(file.data() + h.footer_offset(), crc32(file.data(), h.footer_offset()), h, path);
  // Padding after the CRC: only a file written by another, faulty writer gets here.
  uint64_t end = h.table_offset() + h.table_size;
  for (const TensorEntry& t : table.tensors) {
    check_padding(file.data() + end, t.offset - end, end, path);
    end = t.offset + t.byte_size();
  }
  check_padding(file.data() + end, h.footer_offset() - end, end, path);

  Checkpoint c;
  c.step = h.step;
  c.metadata = std::move(table.metadata);
  c.tensors.reserve(table.tensors.size());
  for (TensorEntry& t : table.tensors) {
    Tensor& out = c.tensors.emplace_back();
    out.name = std::move(t.name);
    out.shape = std::move(t.shape);
    out.data.resize(t.element_count);
    if (t.element_count > 0) std::memcpy(out.data.data(), file.data() + t.offset, t.byte_size());
  }
  return c;
}

}  // namespace hsring::checkpoint
