// Writes checkpoints into a directory so that a crash at any moment leaves the previous
// one intact: each is written to a temporary, fsynced, renamed to
// `step-<step>.hsckpt` and the directory fsynced; only then are old checkpoints removed.
//
// Thread safety: none; one thread owns a CheckpointWriter. Across processes, a writer
// holds an exclusive lock on the directory for its whole life (released by the kernel
// when its process dies), so two runs never write into one directory.
#pragma once

#include <cstdint>
#include <string>

#include "checkpoint/atomic_file.h"
#include "checkpoint/checkpoint_format.h"

namespace hsring::checkpoint {

struct WriterOptions {
  uint32_t keep_last = 3;  // checkpoints kept, the newest included; at least 1
  WriteOptions io;
};

class CheckpointWriter {
 public:
  // Creates `dir` if needed, takes its lock and removes temporaries that dead writers
  // left. Throws Error: locked when another writer holds `dir`, I/O otherwise.
  explicit CheckpointWriter(std::string dir, WriterOptions options = {});
  ~CheckpointWriter();  // releases the lock
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  const std::string& dir() const { return dir_; }
  // Whether the last write went through io_uring (false before the first write).
  bool used_io_uring() const { return used_io_uring_; }

  // Writes `checkpoint` as `dir/step-<step>.hsckpt`, durable when this returns; returns its
  // path. A file of the same step is replaced. Then removes every checkpoint of a greater
  // step (a timeline this run abandoned: it resumed from an earlier checkpoint) and all
  // but the `keep_last` newest of the rest.
  // Throws Error: bad checkpoint (invalid value; nothing written), no space (with
  // the space needed and free), I/O. On a throw before the rename, the temporary is gone
  // and the directory holds what it held before.
  std::string write(const Checkpoint& checkpoint);

 private:
  void remove_old(uint64_t newest_step);

  std::string dir_;
  WriterOptions options_;
  int lock_fd_ = -1;
  bool used_io_uring_ = false;
};

}  // namespace hsring::checkpoint
