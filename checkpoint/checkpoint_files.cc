#include "checkpoint/checkpoint_files.h"

#include <algorithm>
#include <charconv>
#include <filesystem>

#include "common/error.h"

namespace hsring::checkpoint {

namespace fs = std::filesystem;

std::string checkpoint_file_name(uint64_t step) {
  std::string digits = std::to_string(step);
  if (digits.size() < 9) digits.insert(0, 9 - digits.size(), '0');
  return "step-" + digits + kCheckpointExtension;
}

std::optional<uint64_t> parse_checkpoint_file_name(std::string_view name) {
  constexpr std::string_view prefix = "step-";
  constexpr std::string_view extension = kCheckpointExtension;
  if (!name.starts_with(prefix) || !name.ends_with(extension)) return std::nullopt;
  const std::string_view digits =
      name.substr(prefix.size(), name.size() - prefix.size() - extension.size());
  if (digits.empty() ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  uint64_t step = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return step;
}

std::vector<CheckpointFile> list_checkpoint_files(const std::string& dir) {
  std::vector<CheckpointFile> files;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::optional<uint64_t> step = parse_checkpoint_file_name(name);
    // A folder under a step file's name is no checkpoint: taken for one, it blocked the
    // rotation (a "newer" step that cannot be unlinked) and every later checkpoint.
    std::error_code type_error;
    if (step && !it->is_directory(type_error)) files.push_back({*step, it->path().string()});
  }
  if (ec)
    throw Error(Errc::kCheckpoint, dir, "cannot list the checkpoint directory: " + ec.message());
  // Two names can parse to one step ("step-7" and "step-000000007"): the longer name, the
  // one this writer produces, sorts last and so is tried first.
  std::sort(files.begin(), files.end(), [](const CheckpointFile& a, const CheckpointFile& b) {
    return a.step != b.step ? a.step < b.step : a.path.size() < b.path.size();
  });
  return files;
}

std::string temporary_prefix(const std::string& final_name) {
  return kTemporaryPrefix + final_name + ".";
}

size_t remove_temporary_files(const std::string& dir) {
  size_t removed = 0;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (!it->path().filename().string().starts_with(kTemporaryPrefix)) continue;
    std::error_code remove_error;
    if (fs::remove(it->path(), remove_error)) ++removed;
  }
  return removed;
}

}  // namespace hsring::checkpoint
