// Positioned writes kept in flight through one io_uring, completed in any order, short
// writes continued, and an fsync behind them. The first failure is kept and later writes
// are dropped, so a caller checks failure() when it is done issuing.
//
// Thread safety: none; one thread owns a WriteQueue. Where io_uring is unavailable (an
// old kernel, or a seccomp policy that blocks it) writes fall back to blocking pwrite with
// the same results: only the overlap is lost.
#pragma once

#include <liburing.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace hsring::checkpoint {

struct WriteFailure {
  int error = 0;        // errno
  uint64_t offset = 0;  // file offset of the first byte that was not written
  const char* call = "";
};

class WriteQueue {
 public:
  // Up to `capacity` (>= 1) writes of at most `chunk_bytes` (>= 4096) each are in the kernel
  // at once; a longer write is split. `try_io_uring` false forces pwrite.
  WriteQueue(uint32_t capacity, uint32_t chunk_bytes, bool try_io_uring);
  // Waits for the writes still in the kernel: they read from callers' buffers.
  ~WriteQueue();
  WriteQueue(const WriteQueue&) = delete;
  WriteQueue& operator=(const WriteQueue&) = delete;

  bool uses_io_uring() const { return uring_ok_; }

  // Writes `size` bytes of `bytes` at `offset` of `fd`. Returns once the write is in the
  // kernel (io_uring; it may wait for an earlier one to make room) or done (pwrite).
  // REQUIRES: `bytes` stays valid until wait_all() or the destructor returns.
  void write(int fd, const void* bytes, size_t size, uint64_t offset);
  // Waits for every write; then the first failure, if any.
  std::optional<WriteFailure> wait_all();
  // After wait_all(): fsync(fd) (IORING_OP_FSYNC when io_uring is in use); the failure, if any.
  std::optional<WriteFailure> sync(int fd);
  const std::optional<WriteFailure>& failure() const { return failure_; }

 private:
  struct Request {
    int fd;
    const char* bytes;
    uint32_t remaining;
    uint64_t offset;
  };
  void push_sqe(uint32_t index);
  void submit();
  void reap_one();  // waits for one completion and handles it
  void fail(int error, uint64_t offset, const char* call);

  io_uring ring_{};
  bool uring_ok_ = false;
  uint32_t chunk_bytes_;
  std::vector<Request> requests_;   // indexed by the SQE's user_data
  std::vector<uint32_t> free_;      // unused request indexes
  std::vector<uint32_t> prepared_;  // indexes of SQEs not yet handed to the kernel, oldest first
  std::optional<WriteFailure> failure_;
};

}  // namespace hsring::checkpoint
