#include "drafter_proc/group_files.h"

#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <system_error>

#include "common/crc32.h"
#include "common/error.h"
#include "common/text_file.h"

namespace hsring {

namespace {

constexpr char kGroupMagic[8] = {'H', 'S', 'R', 'G', 'R', 'P', '0', '1'};
constexpr char kGenerationMagic[8] = {'H', 'S', 'R', 'G', 'E', 'N', '0', '1'};
constexpr uint32_t kGroupVersion = 1;
constexpr size_t kGroupBytes = 8 + 4 + 4 + 8 + kGroupIdBytes + 4;
constexpr size_t kGenerationBytes = 8 + 8 + 4;
constexpr char kGroupFile[] = "group";

// Little-endian fields, appended and read in order.
template <typename T>
void put(std::string& out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(char((uint64_t(value) >> (8 * i)) & 0xff));
}

template <typename T>
T get(std::string_view bytes, size_t at) {
  uint64_t value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) value |= uint64_t(uint8_t(bytes[at + i])) << (8 * i);
  return T(value);
}

void seal(std::string& out) { put<uint32_t>(out, crc32(out.data(), out.size())); }

// Throws unless `bytes` is `size` bytes opening with `magic` and closing with their CRC.
void check_sealed(std::string_view bytes, size_t size, const char (&magic)[8], const char* what,
                  const std::string& path) {
  const auto fail = [&](const std::string& problem) {
    throw Error(Errc::kGroup, path,
                fmt::format("{}; it is not a {} of an hsring drafter group. Give the group a "
                            "folder of its own (--rendezvous-dir), or remove the file if no "
                            "run uses it",
                            problem, what));
  };
  if (bytes.size() < sizeof magic || std::memcmp(bytes.data(), magic, sizeof magic) != 0)
    fail("unknown format (magic)");
  if (bytes.size() != size) fail(fmt::format("{} bytes where {} belong", bytes.size(), size));
  const uint32_t stored = get<uint32_t>(bytes, size - 4);
  if (stored != crc32(bytes.data(), size - 4)) fail("checksum mismatch (a damaged file)");
}

}  // namespace

std::string encode_group_record(const GroupRecord& record) {
  std::string out(kGroupMagic, sizeof kGroupMagic);
  put<uint32_t>(out, kGroupVersion);
  put<uint32_t>(out, record.members);
  put<uint64_t>(out, record.generation);
  out.append(reinterpret_cast<const char*>(record.id.data()), record.id.size());
  seal(out);
  return out;
}

GroupRecord decode_group_record(std::string_view bytes, const std::string& path) {
  check_sealed(bytes, kGroupBytes, kGroupMagic, "group record", path);
  if (const uint32_t version = get<uint32_t>(bytes, 8); version != kGroupVersion)
    throw Error(Errc::kGroup, path,
                fmt::format("group record version {}, this hsring reads version {}: every "
                            "machine of a run must run the same hsring",
                            version, kGroupVersion));
  GroupRecord record;
  record.members = get<uint32_t>(bytes, 12);
  record.generation = get<uint64_t>(bytes, 16);
  std::memcpy(record.id.data(), bytes.data() + 24, kGroupIdBytes);
  if (record.members < 2 || record.generation == 0)
    throw Error(Errc::kGroup, path,
                fmt::format("a group record of {} members, generation {} (a group has 2 or "
                            "more members and generations from 1)",
                            record.members, record.generation));
  return record;
}

std::string encode_generation(uint64_t generation) {
  std::string out(kGenerationMagic, sizeof kGenerationMagic);
  put<uint64_t>(out, generation);
  seal(out);
  return out;
}

uint64_t decode_generation(std::string_view bytes, const std::string& path) {
  check_sealed(bytes, kGenerationBytes, kGenerationMagic, "member record", path);
  return get<uint64_t>(bytes, 8);
}

GroupFiles::GroupFiles(std::string dir, uint32_t members, uint32_t rank)
    : dir_(std::move(dir)), members_(members), rank_(rank) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec)
    throw Error(Errc::kGroup,
                fmt::format("cannot create the drafter group's rendezvous folder {}: {}", dir_,
                            ec.message()));
}

std::string GroupFiles::path(const std::string& name) const {
  return (std::filesystem::path(dir_) / name).string();
}

std::optional<GroupRecord> GroupFiles::read_group() {
  const std::string file = path(kGroupFile);
  const std::optional<std::string> bytes = read_file_if_exists(file);
  if (!bytes) return std::nullopt;
  return decode_group_record(*bytes, file);
}

std::string GroupFiles::marker_path(const char* kind, uint64_t number) const {
  return path(kind + std::to_string(number));
}

bool GroupFiles::has_marker(const char* kind, uint64_t generation) const {
  std::error_code ec;
  return std::filesystem::exists(marker_path(kind, generation), ec);
}

void GroupFiles::write_marker(const char* kind, uint64_t generation) {
  write_file_atomically(marker_path(kind, generation), encode_generation(generation));
}

bool GroupFiles::is_broken(uint64_t generation) const { return has_marker("broken-", generation); }

bool GroupFiles::is_stopped(uint64_t generation) const {
  return has_marker("stopped-", generation);
}

uint64_t GroupFiles::publish(const GroupId& id) {
  // A number no member has joined: past the published one (and past broken ones a folder
  // reused after its group file was removed may hold).
  const std::optional<GroupRecord> previous = read_group();
  GroupRecord record{previous ? previous->generation + 1 : 1, members_, id};
  while (is_broken(record.generation)) ++record.generation;
  write_file_atomically(path(kGroupFile), encode_group_record(record));
  joined(record.generation);
  return record.generation;
}

std::optional<GroupRecord> GroupFiles::joinable() {
  const std::optional<GroupRecord> record = read_group();
  if (!record) {
    waiting_for_ = "the leader (drafter 0 of node 0) has not published a group in " + dir_;
    return std::nullopt;
  }
  const std::string generation = fmt::format("generation {}", record->generation);
  if (record->members != members_) {
    waiting_for_ = fmt::format(
        "the published {} has {} members, this member expects {}: every node must run the same "
        "number of drafters, with the same --nnodes",
        generation, record->members, members_);
    return std::nullopt;
  }
  if (is_broken(record->generation)) {
    waiting_for_ = "the published " + generation + " is broken; the leader publishes the next";
    return std::nullopt;
  }
  const std::string own_path = marker_path("member-", rank_);
  const std::optional<std::string> own = read_file_if_exists(own_path);
  if (own && decode_generation(*own, own_path) == record->generation) {
    // This rank's previous incarnation was in it: it died there, so the group is broken.
    mark_broken(record->generation);
    waiting_for_ = "this member's previous incarnation was in " + generation +
                   ", now marked broken; the leader publishes the next";
    return std::nullopt;
  }
  return record;
}

void GroupFiles::joined(uint64_t generation) {
  write_file_atomically(marker_path("member-", rank_), encode_generation(generation));
}

std::string GroupFiles::ended(uint64_t generation) {
  if (is_broken(generation))
    return fmt::format("a member left group generation {} ({})", generation, dir_);
  const std::optional<GroupRecord> record = read_group();
  if (!record) return "the group record in " + dir_ + " was removed";
  if (record->generation != generation)
    return fmt::format(
        "the leader published group generation {} (it restarted); this member was in {}",
        record->generation, generation);
  return "";
}

void GroupFiles::mark_broken(uint64_t generation) { write_marker("broken-", generation); }

void GroupFiles::mark_stopped(uint64_t generation) { write_marker("stopped-", generation); }

}  // namespace hsring
