// A file descriptor that closes itself, with the few blocking calls the data layer needs,
// each turning failure into an Error that names the file and the byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hsring::data {

class File {
 public:
  static File open_read(const std::string& path);  // throws Error (I/O)
  // A new file of a random name beside `final_path`, to be renamed to it once complete
  // (common/exclusive_file.h: a planted name is never opened). 0644; throws Error (I/O).
  static File create_temporary_beside(const std::string& final_path);

  File() = default;
  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  uint64_t size() const;  // fstat; throws Error (I/O)

  // Reads exactly `size` bytes at `offset`. Throws Error (truncated) naming the byte
  // where the file ended, or Error (I/O).
  void read_exact(void* out, size_t size, uint64_t offset) const;
  // Reads up to `size` bytes at `offset`; returns how many (fewer only at end of file).
  size_t read_some(void* out, size_t size, uint64_t offset) const;
  void write_all(const void* bytes, size_t size, uint64_t offset) const;
  void sync() const;

 private:
  File(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

}  // namespace hsring::data
