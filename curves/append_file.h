// A file that only grows, written one whole record per write(2) (O_APPEND): a record is
// never interleaved with another writer's, and a process killed between two records
// leaves only whole ones, or at worst a cut last one that readers of the format skip.
#pragma once

#include <string>
#include <string_view>

namespace hsring::curves {

class AppendFile {
 public:
  // Opens (creating it 0644) `path` for appending. Throws Error(kCheckpoint) naming it.
  explicit AppendFile(std::string path);
  ~AppendFile();
  AppendFile(AppendFile&& other) noexcept;
  AppendFile& operator=(AppendFile&&) = delete;
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;

  // Appends `bytes` (short writes are continued). Throws Error(kCheckpoint) naming the
  // failure, with the remedy for a full file system or quota.
  void append(std::string_view bytes);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace hsring::curves
