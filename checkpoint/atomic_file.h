// A file that appears under its final name complete and durable, or not at all: written
// into a temporary in the same directory (through a WriteQueue), fsynced, renamed over the
// final name, and the directory fsynced so the rename itself survives a power loss. The
// temporary is a new file of a random name (common/exclusive_file.h): a symlink or file
// another user planted in the directory is never written through.
//
// Thread safety: none; one thread owns an AtomicFile.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace hsring::checkpoint {

class WriteQueue;

struct WriteOptions {
  uint32_t queue_depth = 8;         // writes in the kernel at once
  uint32_t chunk_bytes = 8u << 20;  // the size of each of those writes
  bool use_io_uring = true;         // false: blocking pwrite and fsync
  // Reserve the whole file (fallocate) before writing, so a full disk fails at once,
  // before gigabytes are written, rather than at the last write.
  bool preallocate = true;
};

class AtomicFile {
 public:
  // Creates a temporary in the directory of `final_path` (named by temporary_prefix, so
  // remove_temporary_files knows it) for a file of `size` bytes. Throws Error: no space
  // when the reservation fails for space, I/O otherwise; either way nothing is left behind.
  AtomicFile(std::string final_path, uint64_t size, const WriteOptions& options);
  // Without commit(): waits for the writes in flight, then removes the temporary.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  bool uses_io_uring() const;
  // Writes `size` bytes at `offset`; bytes never written read as zeros. Throws
  // Error (no space, I/O) on a failure seen so far.
  // REQUIRES: `bytes` stays valid until commit() returns or the AtomicFile is destroyed.
  void write(const void* bytes, size_t size, uint64_t offset);
  // Waits for every write, fsyncs, renames the temporary to the final path, fsyncs the
  // directory. Throws Error (no space, I/O); the temporary is then removed and
  // whatever had the final name before is untouched.
  void commit();

 private:
  [[noreturn]] void fail(const char* call, int error, uint64_t offset) const;

  std::string final_path_;
  std::string temporary_;
  std::string dir_;
  uint64_t size_;
  int fd_ = -1;
  bool committed_ = false;
  std::unique_ptr<WriteQueue> queue_;
};

// fsyncs directory `dir`, so the renames and unlinks in it are durable. Throws
// Error (I/O).
void sync_directory(const std::string& dir);

}  // namespace hsring::checkpoint
