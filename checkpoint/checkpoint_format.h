// The checkpoint file format, byte for byte (docs/checkpoint-format.md): a 64-byte header,
// a table of metadata and tensor entries, 64-byte-aligned fp32 tensor data, and a 16-byte
// footer whose CRC-32 covers every byte before it. Decoding is pure: it checks the bytes
// handed to it and throws Error naming the file, the field and the byte, so it
// is safe on any input. The format is canonical: a Checkpoint has exactly one encoding.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hsring::checkpoint {

// A named fp32 tensor: weights, Adam moments, anything a trainer must restore.
struct Tensor {
  std::string name;
  std::vector<int64_t> shape;  // empty: a scalar of one element
  std::vector<float> data;     // row-major; as many elements as the shape holds

  bool operator==(const Tensor&) const = default;  // compares floats by value (NaN != NaN)
};

// Everything a run needs to continue: the step, small named values (run id, data positions,
// RNG state, config text; binary bytes are fine) and the tensors, in the order written.
struct Checkpoint {
  uint64_t step = 0;
  std::map<std::string, std::string> metadata;
  std::vector<Tensor> tensors;

  // nullptr when no tensor has that name.
  const Tensor* find(std::string_view name) const;
  // Metadata holding a uint64 as decimal text. get_u64 returns nullopt when the key is
  // absent and throws Error (bad table) when the value is not such a number.
  void set_u64(const std::string& key, uint64_t value);
  std::optional<uint64_t> get_u64(const std::string& key) const;
};

// True when both hold the same step, metadata and tensors with bit-identical data (NaN
// payloads and signed zeros included).
bool bit_identical(const Checkpoint& a, const Checkpoint& b);

inline constexpr std::array<char, 8> kCheckpointMagic = {'H', 'S', 'R', 'C', 'K', 'P', 'N', 'T'};
inline constexpr std::array<char, 8> kFooterMagic = {'H', 'S', 'R', 'C', 'K', 'E', 'N', 'D'};
inline constexpr uint32_t kCheckpointVersion = 1;
inline constexpr uint32_t kHeaderSize = 64;
inline constexpr uint32_t kFooterSize = 16;
inline constexpr uint32_t kDataAlignment = 64;
inline constexpr uint32_t kDtypeF32 = 1;
// Bounds that keep every size computed from a header or table far from uint64 overflow.
inline constexpr uint32_t kMaxNameBytes = 4096;        // tensor names and metadata keys
inline constexpr uint32_t kMaxValueBytes = 64u << 20;  // one metadata value
inline constexpr uint32_t kMaxRank = 8;
inline constexpr uint32_t kMaxEntries = 1u << 20;  // metadata entries, and tensor entries
inline constexpr uint64_t kMaxTableBytes = 1ull << 30;
inline constexpr uint64_t kMaxTensorElements = 1ull << 40;
inline constexpr uint64_t kMaxFileBytes = 1ull << 50;

// Field offsets inside the header; the error messages name these bytes.
enum HeaderField : uint32_t {
  kFieldMagic = 0,
  kFieldVersion = 8,
  kFieldHeaderSize = 12,
  kFieldFlags = 16,
  kFieldMetadataCount = 20,
  kFieldTensorCount = 24,
  kFieldTableCrc = 28,
  kFieldStep = 32,
  kFieldTableSize = 40,
  kFieldFileSize = 48,
  kFieldReserved = 56,   // 4 bytes, zero
  kFieldHeaderCrc = 60,  // CRC-32 of bytes [0, 60)
};

struct CheckpointHeader {
  uint32_t version = kCheckpointVersion;
  uint32_t flags = 0;  // none defined in version 1
  uint32_t metadata_count = 0;
  uint32_t tensor_count = 0;
  uint32_t table_crc = 0;  // CRC-32 of the table bytes
  uint64_t step = 0;
  uint64_t table_size = 0;
  uint64_t file_size = 0;

  uint64_t table_offset() const { return kHeaderSize; }
  uint64_t data_offset() const;  // the table's end rounded up to kDataAlignment
  uint64_t footer_offset() const { return file_size - kFooterSize; }
};

// One tensor entry of the table: where its data lies, not the data.
struct TensorEntry {
  std::string name;
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // absolute file offset of the first element, a multiple of 64
  uint64_t element_count = 0;
  uint64_t byte_size() const { return element_count * sizeof(float); }
};

struct CheckpointTable {
  std::map<std::string, std::string> metadata;
  std::vector<TensorEntry> tensors;  // in file order
};

// A whole checkpoint in memory. Throws Error (bad checkpoint) for a value that
// cannot be written: empty, long or duplicate names, data that does not fill the shape,
// bounds above.
std::vector<std::byte> encode_checkpoint(const Checkpoint& checkpoint);

// Decodes and checks a whole checkpoint file `path` held in `file`. Throws Error
// (foreign, bad version, bad header, truncated, trailing bytes, checksum, bad table).
Checkpoint decode_checkpoint(std::span<const std::byte> file, const std::string& path);

// ---- The pieces of the two above, for a writer and a reader that stream tensor data
// between the file and the Checkpoint's own vectors instead of one buffer. ----

// What a streaming writer puts where. `head` is the file's bytes [0, data_offset): header,
// table and zero padding. Tensor i's data goes to tensor_offsets[i]; the bytes between
// tensors are zero; the footer goes to file_size - kFooterSize.
struct CheckpointPlan {
  std::vector<std::byte> head;
  std::vector<uint64_t> tensor_offsets;
  uint64_t file_size = 0;
};
// Checks `checkpoint` as encode_checkpoint does; throws Error (bad checkpoint).
CheckpointPlan plan_checkpoint(const Checkpoint& checkpoint);
// The footer, given the CRC-32 (continued from 0) of every byte before it.
std::array<std::byte, kFooterSize> encode_footer(uint32_t crc_before_footer);

std::array<std::byte, kHeaderSize> encode_header(const CheckpointHeader& header);
// Decodes the first `available` bytes of `path`, a file of `file_size` bytes, and checks
// that the header is valid and that the file has exactly the size it gives.
CheckpointHeader decode_header(const std::byte* bytes, size_t available, uint64_t file_size,
                               const std::string& path);
// Decodes the table of `header`: its table_size bytes at `bytes`. Checks its CRC, every
// entry's bounds, names unique, metadata keys in increasing byte order, and that the
// tensors lie back to back at 64-byte boundaries and end where the footer begins.
CheckpointTable decode_table(const std::byte* bytes, const CheckpointHeader& header,
                             const std::string& path);
// Checks that the `size` bytes at file offset `offset` (padding between regions) are zero.
void check_padding(const std::byte* bytes, uint64_t size, uint64_t offset, const std::string& path);
// Checks the footer at `footer` against `crc_before_footer`, the CRC-32 of every byte
// before it.
void check_footer(const std::byte* footer, uint32_t crc_before_footer,
                  const CheckpointHeader& header, const std::string& path);

// Rounds up to the next multiple of kDataAlignment.
constexpr uint64_t align_data(uint64_t offset) {
  return (offset + kDataAlignment - 1) / kDataAlignment * kDataAlignment;
}

}  // namespace hsring::checkpoint
