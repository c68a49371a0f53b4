// A mapped ring segment: creation, validated attachment and removal, and typed access to
// its regions. Construction goes through factories that throw Error, so an invalid
// Ring never exists (docs/ring-protocol.md, invariant 7: nothing in the segment is trusted).
//
// The immutable header fields (shape, layout, creator) are validated once, at attach, and
// kept in process memory: every offset and bound this class hands out comes from that copy,
// so a process that rewrites the live header later cannot move a pointer outside the
// mapping. check_intact() tells when the live header no longer equals the copy.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "common/contract.h"
#include "common/error.h"
#include "shm/ring_layout.h"

namespace hsring {

// The suffix of the longest segment named after a ring: the CPU drafter groups' gradient
// exchange "<ring>-grads" (drafter_proc/grad_exchange.h, which names its segment with it).
inline constexpr std::string_view kGradientSegmentSuffix = "-grads";
// The longest ring name: NAME_MAX bytes for the /dev/shm entry, less that suffix.
inline constexpr size_t kMaxRingNameBytes = 255 - kGradientSegmentSuffix.size();
// "" when `name` can name a ring (and the segments named after it), else why not: empty,
// "." or "..", a '/', a control character (NUL included), not UTF-8, or longer than
// kMaxRingNameBytes. Spaces, quotes, backslashes and any other UTF-8 are allowed (outputs
// escape them).
std::string ring_name_problem(const std::string& name);

// Checks a shape against the ring's limits; returns "" when valid, else what is wrong.
std::string validate_shape(const RingShape& shape);
// The layout that a valid shape implies. REQUIRES: validate_shape(shape).empty() (checked
// where contracts are: common/contract.h).
RingLayout compute_layout(const RingShape& shape);
// What a segment's header fixes for its whole life, validated.
struct RingGeometry {
  RingShape shape;
  RingLayout layout;
  uint32_t creator_uid = 0;
};

// Checks the bytes of a would-be segment of `size` bytes; throws Error naming the
// first problem. Reads only what it has checked it may read, from one copy of the header,
// and returns what it validated in that copy.
RingGeometry validate_segment(const std::byte* base, size_t size, const std::string& name);

class Ring {
 public:
  enum class Access { kReadWrite, kReadOnly };

  // Creates the segment `name` (mode 0600) with its space reserved, so a full /dev/shm
  // fails here and not with SIGBUS later. Throws Error (kBadName: see
  // ring_name_problem; create and attach both check the name first).
  static std::unique_ptr<Ring> create(const std::string& name, const RingShape& shape);
  // Opens and validates an existing segment. Throws Error.
  static std::unique_ptr<Ring> attach(const std::string& name, Access access = Access::kReadWrite);
  // Unlinks the segment; false when there was none (or `name` cannot name a ring). Mapped
  // users keep their mapping.
  static bool remove(const std::string& name);
  // Where the segment appears in the file system.
  static std::string path_of(const std::string& name);

  ~Ring();
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  const std::string& name() const { return name_; }
  // "NAME@CREATED_UNIX_NS": names this run, since a ring is created anew for every run,
  // for what a run leaves behind (an export's origin) to be told from an earlier run's.
  std::string run_identity() const;
  bool writable() const { return writable_; }
  // The live header: its atomics (run state, futexes, counters) are shared state. Its
  // immutable fields are read through shape() and layout(), never here.
  RingHeader& header() const { return *reinterpret_cast<RingHeader*>(base_); }
  // The validated copies (see above).
  const RingShape& shape() const { return geometry_.shape; }
  const RingLayout& layout() const { return geometry_.layout; }
  uint32_t slot_count() const { return shape().slot_count; }
  uint32_t process_count() const { return shape().num_targets + shape().num_drafters; }
  // "" while the live header's immutable fields equal the copy and the segment still has
  // its size; else what changed ("slot_count was 16, is now 994"; "the segment was
  // truncated to 4096 bytes, it needs 1052672"). A system call (fstat) and a compare:
  // for a periodic check (heartbeats, the launcher's loop), not for hot paths.
  std::string check_intact() const;
  std::byte* base() const { return base_; }
  size_t size() const { return size_; }
  // The segment's descriptor: its open-file-description locks carry liveness.
  int fd() const { return fd_; }
  // The process index whose liveness lock this mapping holds, or -1 (see liveness.h).
  int32_t liveness_index() const { return liveness_index_; }
  void set_liveness_index(int32_t index) { liveness_index_ = index; }

  // Inline: the protocol scans slot headers on every claim (the contract checks compile
  // out of release builds: common/contract.h).
  // REQUIRES: index < slot_count()
  SlotHeader& slot(uint32_t index) const noexcept {
    HSRING_REQUIRE(index < slot_count());
    return reinterpret_cast<SlotHeader*>(base_ + layout().slot_headers_offset)[index];
  }
  // REQUIRES: index < slot_count()
  std::byte* payload(uint32_t index) const noexcept {
    HSRING_REQUIRE(index < slot_count());
    return base_ + layout().payload_offset + layout().slot.stride * index;
  }
  // REQUIRES: index < process_count()
  ProcessEntry& process(uint32_t index) const noexcept {
    HSRING_REQUIRE(index < process_count());
    return reinterpret_cast<ProcessEntry*>(base_ + layout().process_table_offset)[index];
  }
  // REQUIRES: target < shape().num_targets
  TargetProgress& target_progress(uint32_t target) const noexcept {
    HSRING_REQUIRE(target < shape().num_targets);
    return reinterpret_cast<TargetProgress*>(base_ + layout().target_progress_offset)[target];
  }
  // nullptr when batch_id is beyond the ledger's capacity.
  LedgerEntry* ledger_entry(uint64_t batch_id) const noexcept {
    if (batch_id >= shape().ledger_capacity) return nullptr;
    return reinterpret_cast<LedgerEntry*>(base_ + layout().ledger_offset) + batch_id;
  }

  // Payload regions of slot `index`, bounds taken from the validated layout. Their
  // lengths are the shape's (max_tokens; doc_offsets max_tokens + 1), not the batch's: a
  // claimed batch is read through SlotView (shm/slot_view.h), which bounds them by its
  // header once. In the concatenated layout (split_layers == 0) every layer's region is
  // the one [T, K*H] region. REQUIRES: index < slot_count(); layer < shape().num_layers.
  std::byte* layer_region(uint32_t index, uint32_t layer) const noexcept;
  int32_t* tokens(uint32_t index) const noexcept;
  int32_t* positions(uint32_t index) const noexcept;
  int32_t* doc_offsets(uint32_t index) const noexcept;
  int32_t* labels(uint32_t index) const noexcept;

 private:
  struct Segment;  // the Boost.Interprocess objects behind the mapping
  Ring(std::string name, std::unique_ptr<Segment> segment, bool writable, RingGeometry geometry);

  std::string name_;
  RingGeometry geometry_;
  std::unique_ptr<Segment> segment_;
  int fd_;
  std::byte* base_;
  size_t size_;
  bool writable_;
  int32_t liveness_index_ = -1;
};

}  // namespace hsring
