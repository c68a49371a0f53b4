#include "shm/ring.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <vector>

#include "common/clock.h"
#include "common/error.h"
#include "common/syscheck.h"
#include "shm/bus_guard.h"
#include "shm/segment_file.h"

namespace hsring {

namespace {

constexpr uint64_t align_up(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

std::string mib(uint64_t bytes) { return fmt::format("{} MiB", (bytes + (1u << 20) - 1) >> 20); }

// The file-level errors of SegmentFile, with the advice that fits a ring.
[[noreturn]] void rethrow_for_ring(const Error& e, const std::string& name) {
  if (e.code() == Errc::kRingNotFound)
    throw Error(Errc::kRingNotFound,
                fmt::format("ring '{0}' does not exist (no {1}): start it with `hsring run "
                            "--ring {0}` or check the name",
                            name, Ring::path_of(name)));
  if (e.code() == Errc::kRingExists)
    throw Error(Errc::kRingExists,
                fmt::format("ring '{0}' already exists: `hsring ring inspect {0}` shows it, "
                            "`hsring ring remove {0}` removes a stale one",
                            name));
  throw;
}

}  // namespace

struct Ring::Segment {
  SegmentFile file;
  SegmentMapping mapping;
};

std::string Ring::run_identity() const {
  return name_ + "@" + std::to_string(header().created_unix_ns);
}

std::string Ring::path_of(const std::string& name) { return "/dev/shm/" + name; }

namespace {

void check_ring_name(const std::string& name) {
  if (std::string why = ring_name_problem(name); !why.empty())
    throw Error(Errc::kRingBadName, "bad ring name: " + why);
}

}  // namespace

std::string validate_shape(const RingShape& s) {
  if (s.slot_count < 2 || s.slot_count > kMaxSlots)
    return fmt::format("slot count {} is outside [2, {}]", s.slot_count, kMaxSlots);
  if (s.max_tokens < 1 || s.max_tokens > (1u << 20))
    return fmt::format("max tokens per slot {} is outside [1, 1048576]", s.max_tokens);
  if (s.hidden_size < 1 || s.hidden_size > (1u << 16))
    return fmt::format("hidden size {} is outside [1, 65536]", s.hidden_size);
  if (s.num_layers < 1 || s.num_layers > kMaxCapturedLayers)
    return fmt::format("captured layer count {} is outside [1, {}]", s.num_layers,
                       kMaxCapturedLayers);
  if (dtype_size(s.dtype) == 0) return fmt::format("unknown dtype {}", uint32_t(s.dtype));
  if (s.split_layers > 1) return "split_layers must be 0 or 1";
  if (s.content != PayloadContent::kSynthetic && s.content != PayloadContent::kModel)
    return fmt::format("unknown payload content {}", uint32_t(s.content));
  if (s.content == PayloadContent::kModel && s.vocab_size < 1)
    return "a ring of model batches needs the model's vocabulary size";
  if (s.num_targets < 1 || s.num_drafters < 1)
    return "a ring needs at least one target and one drafter";
  if (s.data_offset % s.num_targets != 0)
    return fmt::format("data offset {} is not a multiple of the {} targets", s.data_offset,
                       s.num_targets);
  // Sums in 64 bits: 32-bit sums of header fields could wrap into range.
  const uint64_t workers = uint64_t(s.num_targets) + s.num_drafters;
  if (workers > kMaxProcesses)
    return fmt::format("{} workers exceed the limit of {}", workers, kMaxProcesses);
  if (s.hs_min_ready < 1 || uint64_t(s.hs_min_ready) + s.num_targets > s.slot_count)
    return fmt::format(
        "hs_min_ready {} must be at least 1 and leave one slot per target (slot count {}, "
        "targets {})",
        s.hs_min_ready, s.slot_count, s.num_targets);
  if (s.ledger_capacity < 1 || s.ledger_capacity > (1ull << 28))
    return fmt::format("ledger capacity {} is outside [1, 2^28]", s.ledger_capacity);
  if (s.ordered_claims > 1) return "ordered_claims must be 0 or 1";
  if (s.ordered_claims && s.batch_limit == 0)
    return "ordered claims need a batch limit: the ledger tells which batches were consumed";
  if (s.batch_limit > s.ledger_capacity)
    return fmt::format("batch limit {} exceeds the ledger capacity {}", s.batch_limit,
                       s.ledger_capacity);
  return "";
}

RingLayout compute_layout(const RingShape& s) {
  HSRING_REQUIRE(validate_shape(s).empty());
  RingLayout l{};
  uint64_t offset = align_up(sizeof(RingHeader), kRegionAlign);
  l.process_table_offset = offset;
  offset = align_up(offset + sizeof(ProcessEntry) * (s.num_targets + s.num_drafters), kRegionAlign);
  l.target_progress_offset = offset;
  offset = align_up(offset + sizeof(TargetProgress) * s.num_targets, kRegionAlign);
  l.ledger_offset = offset;
  offset = align_up(offset + sizeof(LedgerEntry) * s.ledger_capacity, kRegionAlign);
  l.slot_headers_offset = offset;
  offset = align_up(offset + sizeof(SlotHeader) * s.slot_count, kRegionAlign);
  l.payload_offset = offset;

  SlotLayout& slot = l.slot;
  slot.layer_bytes = uint64_t(s.max_tokens) * s.hidden_size * dtype_size(s.dtype);
  uint64_t in_slot = 0;
  if (s.split_layers) {
    for (uint32_t k = 0; k < s.num_layers; ++k) {
      slot.layer_offset[k] = in_slot;
      in_slot = align_up(in_slot + slot.layer_bytes, kRegionAlign);
    }
  } else {
    slot.layer_offset[0] = 0;
    in_slot = align_up(slot.layer_bytes * s.num_layers, kRegionAlign);
  }
  const uint64_t ints = uint64_t(s.max_tokens) * sizeof(int32_t);
  slot.tokens_offset = in_slot;
  in_slot = align_up(in_slot + ints, kRegionAlign);
  slot.positions_offset = in_slot;
  in_slot = align_up(in_slot + ints, kRegionAlign);
  slot.doc_offsets_offset = in_slot;
  in_slot = align_up(in_slot + ints + sizeof(int32_t), kRegionAlign);
  slot.labels_offset = in_slot;
  in_slot = align_up(in_slot + ints, kRegionAlign);
  slot.stride = in_slot;

  l.total_size = l.payload_offset + slot.stride * s.slot_count;
  return l;
}

RingGeometry validate_segment(const std::byte* base, size_t size, const std::string& name) {
  const std::string ring = "ring '" + name + "'";
  if (size < sizeof(RingHeader)) {
    throw Error(Errc::kRing, fmt::format("{} is truncated: {} bytes, smaller than its header; "
                                         "remove it with `hsring ring remove {}`",
                                         ring, size, name));
  }
  // The header is plain bytes until validated: copy it out rather than trusting its atomics.
  alignas(RingHeader) std::byte copy[sizeof(RingHeader)];
  std::memcpy(copy, base, sizeof(RingHeader));
  const auto& h = *reinterpret_cast<const RingHeader*>(copy);
  uint64_t magic;
  std::memcpy(&magic, copy, sizeof magic);
  if (magic != kRingMagic) {
    throw Error(Errc::kRing, ring +
                                 " is not an hsring segment (wrong magic); "
                                 "another program owns " +
                                 Ring::path_of(name) + " or it was never initialised");
  }
  if (h.version != kRingVersion) {
    throw Error(Errc::kRing,
                fmt::format("{} uses protocol version {}, this build speaks version {}: stop the "
                            "run that made it, or use the hsring that created it",
                            ring, h.version, kRingVersion));
  }
  if (h.header_size != sizeof(RingHeader)) {
    throw Error(Errc::kRing, fmt::format("{} has a header of {} bytes, expected {}", ring,
                                         h.header_size, sizeof(RingHeader)));
  }
  if (std::string why = validate_shape(h.shape); !why.empty()) {
    throw Error(Errc::kRing, ring + " has an invalid shape: " + why);
  }
  const RingLayout expected = compute_layout(h.shape);
  if (std::memcmp(&expected, &h.layout, sizeof(RingLayout)) != 0) {
    throw Error(Errc::kRing,
                ring + " has a layout that does not follow from its shape (corrupt header)");
  }
  if (expected.total_size > size) {
    throw Error(Errc::kRing, fmt::format("{} is truncated: its layout needs {} bytes, the "
                                         "segment has {}; remove it with `hsring ring remove {}`",
                                         ring, expected.total_size, size, name));
  }
  return RingGeometry{h.shape, h.layout, h.creator_uid};
}

namespace {

// One immutable header field, as kept and as it is now.
struct FieldValue {
  std::string name;
  uint64_t kept;
  uint64_t live;
};

// Every immutable field of the header, named, kept against live.
std::vector<FieldValue> immutable_fields(const RingGeometry& kept, const RingHeader& live) {
  const RingShape& a = kept.shape;
  const RingShape& b = live.shape;
  std::vector<FieldValue> f = {
      {"version", kRingVersion, live.version},
      {"header_size", sizeof(RingHeader), live.header_size},
      {"creator_uid", kept.creator_uid, live.creator_uid},
      {"slot_count", a.slot_count, b.slot_count},
      {"max_tokens", a.max_tokens, b.max_tokens},
      {"hidden_size", a.hidden_size, b.hidden_size},
      {"num_layers", a.num_layers, b.num_layers},
      {"dtype", uint32_t(a.dtype), uint32_t(b.dtype)},
      {"split_layers", a.split_layers, b.split_layers},
      {"num_targets", a.num_targets, b.num_targets},
      {"num_drafters", a.num_drafters, b.num_drafters},
      {"hs_min_ready", a.hs_min_ready, b.hs_min_ready},
      {"content", uint32_t(a.content), uint32_t(b.content)},
      {"vocab_size", a.vocab_size, b.vocab_size},
      {"ordered_claims", a.ordered_claims, b.ordered_claims},
      {"batch_limit", a.batch_limit, b.batch_limit},
      {"ledger_capacity", a.ledger_capacity, b.ledger_capacity},
      {"data_offset", a.data_offset, b.data_offset},
  };
  for (uint32_t k = 0; k < kMaxCapturedLayers; ++k)
    f.push_back(
        {fmt::format("layer_ids[{}]", k), uint32_t(a.layer_ids[k]), uint32_t(b.layer_ids[k])});
  const RingLayout& x = kept.layout;
  const RingLayout& y = live.layout;
  f.insert(f.end(),
           {
               {"process_table_offset", x.process_table_offset, y.process_table_offset},
               {"target_progress_offset", x.target_progress_offset, y.target_progress_offset},
               {"ledger_offset", x.ledger_offset, y.ledger_offset},
               {"slot_headers_offset", x.slot_headers_offset, y.slot_headers_offset},
               {"payload_offset", x.payload_offset, y.payload_offset},
               {"total_size", x.total_size, y.total_size},
               {"stride", x.slot.stride, y.slot.stride},
               {"layer_bytes", x.slot.layer_bytes, y.slot.layer_bytes},
               {"tokens_offset", x.slot.tokens_offset, y.slot.tokens_offset},
               {"positions_offset", x.slot.positions_offset, y.slot.positions_offset},
               {"doc_offsets_offset", x.slot.doc_offsets_offset, y.slot.doc_offsets_offset},
               {"labels_offset", x.slot.labels_offset, y.slot.labels_offset},
           });
  for (uint32_t k = 0; k < kMaxCapturedLayers; ++k)
    f.push_back(
        {fmt::format("layer_offset[{}]", k), x.slot.layer_offset[k], y.slot.layer_offset[k]});
  return f;
}

}  // namespace

std::string Ring::check_intact() const {
  struct stat st {};
  if (::fstat(fd_, &st) == 0 && uint64_t(st.st_size) < layout().total_size)
    return fmt::format("the segment was truncated to {} bytes while live; it needs {}", st.st_size,
                       layout().total_size);
  // Plain bytes, like validate_segment: a writer may be changing them as we copy.
  alignas(RingHeader) std::byte copy[sizeof(RingHeader)];
  std::memcpy(copy, base_, sizeof(RingHeader));
  const auto& live = *reinterpret_cast<const RingHeader*>(copy);
  uint64_t magic;
  std::memcpy(&magic, copy, sizeof magic);
  if (magic != kRingMagic) return "its magic was overwritten while live";
  // The common case, without building the named list.
  if (std::memcmp(&live.shape, &geometry_.shape, sizeof(RingShape)) == 0 &&
      std::memcmp(&live.layout, &geometry_.layout, sizeof(RingLayout)) == 0 &&
      live.version == kRingVersion && live.header_size == sizeof(RingHeader) &&
      live.creator_uid == geometry_.creator_uid)
    return "";
  for (const FieldValue& field : immutable_fields(geometry_, live)) {
    if (field.kept != field.live)
      return fmt::format("{} was {}, is now {}", field.name, field.kept, field.live);
  }
  return "";
}

Ring::Ring(std::string name, std::unique_ptr<Segment> segment, bool writable, RingGeometry geometry)
    : name_(std::move(name)),
      geometry_(geometry),
      segment_(std::move(segment)),
      fd_(segment_->file.fd()),
      base_(segment_->mapping.base()),
      size_(segment_->mapping.size()),
      writable_(writable) {
  guard_mapping(base_, size_, name_);
}

Ring::~Ring() { unguard_mapping(base_); }

std::unique_ptr<Ring> Ring::create(const std::string& name, const RingShape& shape) {
  check_ring_name(name);
  if (std::string why = validate_shape(shape); !why.empty()) {
    throw Error(Errc::kRingBadShape, "cannot create ring '" + name + "': " + why);
  }
  const RingLayout layout = compute_layout(shape);
  const std::string what = "ring '" + name + "'";
  std::unique_ptr<Segment> segment;
  try {
    segment.reset(new Segment{
        SegmentFile::open(name, what, SegmentFile::Open::kCreate, SegmentFile::Access::kReadWrite),
        SegmentMapping()});
  } catch (const Error& e) {
    rethrow_for_ring(e, name);
  }
  const int fd = segment->file.fd();
  // Reserve the pages now: tmpfs would otherwise accept the size and SIGBUS on first touch.
  if (int err = ::posix_fallocate(fd, 0, off_t(layout.total_size)); err != 0) {
    struct statvfs fs {};
    std::string free_space = ::statvfs("/dev/shm", &fs) == 0
                                 ? mib(uint64_t(fs.f_bavail) * fs.f_frsize) + " free"
                                 : "unknown free space";
    Ring::remove(name);
    if (err == ENOSPC) {
      throw Error(Errc::kRing,
                  fmt::format("ring '{}' needs {} but /dev/shm has {}: remove stale rings "
                              "(`hsring ring gc`), use fewer --slots or --max-tokens, or "
                              "enlarge /dev/shm",
                              name, mib(layout.total_size), free_space));
    }
    throw sys_error(Errc::kRing, err,
                    fmt::format("cannot reserve {} for ring '{}'", mib(layout.total_size), name));
  }
  try {
    segment->mapping = SegmentMapping(fd, layout.total_size, true, what);
  } catch (const Error&) {
    Ring::remove(name);
    throw;
  }
  auto ring = std::unique_ptr<Ring>(
      new Ring(name, std::move(segment), true, RingGeometry{shape, layout, ::geteuid()}));

  // Fresh tmpfs pages are zero, and zero is a valid value of every atomic here (lock-free
  // atomics are plain words), so only non-zero fields need writing.
  RingHeader& h = ring->header();
  h.version = kRingVersion;
  h.header_size = sizeof(RingHeader);
  h.creator_uid = ::geteuid();
  h.created_unix_ns = unix_ns();
  h.shape = shape;
  h.layout = layout;
  for (uint32_t i = 0; i < ring->process_count(); ++i) {
    ProcessEntry& p = ring->process(i);
    p.role.store(uint32_t(i < shape.num_targets ? Role::kTarget : Role::kDrafter),
                 std::memory_order_relaxed);
    p.gpu.store(-1, std::memory_order_relaxed);
  }
  // Every slot starts FREE (word 0), so every FREE hint starts set; published by the magic.
  for (uint32_t i = 0; i < shape.slot_count; ++i)
    h.free_hints.words[i / 64].fetch_or(uint64_t(1) << (i % 64), std::memory_order_relaxed);
  // SYNC POINT WRITE: every field above. The release store of the magic publishes the
  // initialised header to attachers, which load the magic with acquire.
  h.magic.store(kRingMagic, std::memory_order_release);
  return ring;
}

std::unique_ptr<Ring> Ring::attach(const std::string& name, Access access) {
  check_ring_name(name);
  const bool writable = access == Access::kReadWrite;
  const std::string what = "ring '" + name + "'";
  std::unique_ptr<Segment> segment;
  try {
    segment.reset(new Segment{SegmentFile::open(name, what, SegmentFile::Open::kExisting,
                                                writable ? SegmentFile::Access::kReadWrite
                                                         : SegmentFile::Access::kReadOnly),
                              SegmentMapping()});
  } catch (const Error& e) {
    rethrow_for_ring(e, name);
  }
  const size_t size = size_t(segment->file.size_at_open());
  if (size < sizeof(RingHeader)) validate_segment(nullptr, size, name);  // throws: truncated
  segment->mapping = SegmentMapping(segment->file.fd(), size, writable, what);
  const std::byte* base = segment->mapping.base();
  // SYNC POINT READ: pairs with the creator's release store of the magic.
  (void)reinterpret_cast<const RingHeader*>(base)->magic.load(std::memory_order_acquire);
  const RingGeometry geometry = validate_segment(base, size, name);
  return std::unique_ptr<Ring>(new Ring(name, std::move(segment), writable, geometry));
}

bool Ring::remove(const std::string& name) {
  if (!ring_name_problem(name).empty()) return false;  // ".." must never reach shm_unlink
  return ::shm_unlink(("/" + name).c_str()) == 0;
}

std::byte* Ring::layer_region(uint32_t index, uint32_t layer) const noexcept {
  HSRING_REQUIRE(layer < shape().num_layers);
  const SlotLayout& s = layout().slot;
  // Concatenated layout: layer k starts k*H elements into each row, not at a region.
  return payload(index) + (shape().split_layers ? s.layer_offset[layer] : 0);
}

int32_t* Ring::tokens(uint32_t index) const noexcept {
  return reinterpret_cast<int32_t*>(payload(index) + layout().slot.tokens_offset);
}
int32_t* Ring::positions(uint32_t index) const noexcept {
  return reinterpret_cast<int32_t*>(payload(index) + layout().slot.positions_offset);
}
int32_t* Ring::doc_offsets(uint32_t index) const noexcept {
  return reinterpret_cast<int32_t*>(payload(index) + layout().slot.doc_offsets_offset);
}
int32_t* Ring::labels(uint32_t index) const noexcept {
  return reinterpret_cast<int32_t*>(payload(index) + layout().slot.labels_offset);
}

}  // namespace hsring
