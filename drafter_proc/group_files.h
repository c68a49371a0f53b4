// The rendezvous of a drafter group that spans machines, through files in a folder every
// machine sees (RUN_DIR/rendezvous on shared storage). Each machine has its own ring, so
// the ring header cannot carry the NCCL id (shm/nccl_rendezvous.h) and a peer's liveness
// cannot be probed; instead the group has numbered *generations*:
//
//   group        the current generation: its number, the group's size and the NCCL id.
//                The leader (global rank 0) writes generation max + 1 at every start.
//   broken-G     exists once a member left generation G (its group broke for it).
//   member-R     the generation member R last joined. A restarted incarnation of R finds
//                its predecessor's generation there and marks it broken: R's crash ends
//                the group on every machine, although no one there saw R die.
//   stopped-G    a member of generation G stopped with its machine's run (a drain): the
//                members of G stop their machines' runs too. Only members that joined G
//                heed it, so a resumed run's members never see the last run's end.
//
// A member joins the published generation unless it is broken; while it runs it polls
// ended(G): a newer generation (the leader restarted) or broken-G (a member left) ends it.
// Every file is written whole to a temporary name and renamed over the old one, and
// carries a magic and a CRC-32: a reader sees one whole version or refuses the file.
// Ordering across machines is the shared filesystem's (a rename is atomic on NFS and
// Lustre; attribute caching may delay what a poll sees by a few seconds).
//
// Thread safety: none; one per member process.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"

namespace hsring {

inline constexpr size_t kGroupIdBytes = 128;  // NCCL's ncclUniqueId
using GroupId = std::array<unsigned char, kGroupIdBytes>;

struct GroupRecord {
  uint64_t generation = 0;
  uint32_t members = 0;
  GroupId id{};
};

// The file formats (docs/drafter-training.md): little-endian, CRC-32 (zlib's) last.
//   group:     "HSRGRP01" u32 version u32 members u64 generation u8[128] id u32 crc
//   member-R:  "HSRGEN01" u64 generation u32 crc
std::string encode_group_record(const GroupRecord& record);
// Throws Error naming `path` and the problem.
GroupRecord decode_group_record(std::string_view bytes, const std::string& path);
std::string encode_generation(uint64_t generation);
uint64_t decode_generation(std::string_view bytes, const std::string& path);

class GroupFiles {
 public:
  // Member `rank` of a group of `members` in `dir` (created when missing). Throws
  // Error(kGroup) when the folder cannot be made.
  GroupFiles(std::string dir, uint32_t members, uint32_t rank);

  // The leader: publishes a new generation with `id`; returns its number.
  uint64_t publish(const GroupId& id);

  // A member: the published generation it may join, or nullopt while there is none (the
  // leader has not published, the published one is broken, or is of another group size:
  // waiting_for() says which). When this rank's previous incarnation had joined the
  // published generation, this call marks it broken and gives nullopt.
  std::optional<GroupRecord> joinable();
  // Why joinable() gave nullopt, for a rendezvous that times out.
  const std::string& waiting_for() const { return waiting_for_; }

  // Records that this member joined `generation`.
  void joined(uint64_t generation);
  // "" while `generation` stands; else why it ended.
  std::string ended(uint64_t generation);
  // This member leaves `generation`: it ends for every member.
  void mark_broken(uint64_t generation);
  // This member's run stops: so does every other machine's that is in `generation`.
  void mark_stopped(uint64_t generation);
  bool is_stopped(uint64_t generation) const;

  const std::string& dir() const { return dir_; }

 private:
  std::optional<GroupRecord> read_group();
  bool is_broken(uint64_t generation) const;
  // DIR/<kind><number>: broken-G, stopped-G, member-R.
  std::string marker_path(const char* kind, uint64_t number) const;
  bool has_marker(const char* kind, uint64_t generation) const;
  void write_marker(const char* kind, uint64_t generation);
  std::string path(const std::string& name) const;

  std::string dir_;
  uint32_t members_, rank_;
  std::string waiting_for_;
};

}  // namespace hsring
