// What lives in a checkpoint directory and how it is named: `step-000000123.hsckpt` files,
// `.tmp-*` temporaries of writes in progress (or cut short), and the `.lock` file of the
// one writer. There is no LATEST pointer: the newest valid step file is the checkpoint.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hsring::checkpoint {

inline constexpr char kCheckpointExtension[] = ".hsckpt";
inline constexpr char kTemporaryPrefix[] = ".tmp-";
inline constexpr char kLockFileName[] = ".lock";

// "step-000000123.hsckpt": the step in at least 9 digits, so names sort by step for a
// person listing the folder (code orders by the parsed step).
std::string checkpoint_file_name(uint64_t step);
// The step of a file named as above (any number of digits, value within uint64), else
// nullopt.
std::optional<uint64_t> parse_checkpoint_file_name(std::string_view name);

struct CheckpointFile {
  uint64_t step = 0;
  std::string path;
};
// The checkpoint files of `dir`, by increasing step; temporaries, other names and folders
// named like a step file are ignored. Throws Error (I/O) when `dir` cannot be listed (missing
// included).
std::vector<CheckpointFile> list_checkpoint_files(const std::string& dir);

// The start of the name of a temporary for a file to be renamed to `final_name`; the
// writer adds random characters (create_exclusive_temporary).
std::string temporary_prefix(const std::string& final_name);
// Removes the temporaries left in `dir` by writers that died, as far as it can (one that
// cannot be removed is harmless: readers ignore it). REQUIRES: no writer is writing into
// `dir` (the caller holds its lock). Returns how many were removed.
size_t remove_temporary_files(const std::string& dir);

}  // namespace hsring::checkpoint
