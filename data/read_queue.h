// Positioned reads kept in flight through one io_uring, completed in any order. The queue
// continues short reads itself, so a finished request has all its bytes or an error.
//
// Thread safety: none; one thread owns a ReadQueue. Where io_uring is unavailable (an old
// kernel, or a seccomp policy that blocks it) the queue falls back to blocking pread, with
// the same results: only the overlap is lost.
#pragma once

#include <liburing.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace hsring::data {

struct ReadResult {
  uint64_t tag = 0;
  int error = 0;             // errno of a failed read, else 0
  bool ended_early = false;  // end of file before all bytes were read
  uint64_t stop_offset = 0;  // file offset where an error or the end of file happened
};

class ReadQueue {
 public:
  // Up to `capacity` requests are in the kernel at once; more wait in the queue's own
  // submission path. Throws Error (bad options) for capacity 0.
  explicit ReadQueue(uint32_t capacity);
  ~ReadQueue();
  ReadQueue(const ReadQueue&) = delete;
  ReadQueue& operator=(const ReadQueue&) = delete;

  bool uses_io_uring() const { return uring_ok_; }
  uint32_t pending() const { return pending_; }  // requests queued and not yet returned

  // Queues a read of `size` bytes at `offset` of `fd` into `buffer`, sent to the kernel by
  // the next submit() or poll(). `buffer` must stay valid until the request is returned.
  void read(int fd, void* buffer, uint32_t size, uint64_t offset, uint64_t tag);
  // Hands queued reads to the kernel without waiting.
  void submit();
  // A finished request: waits for one when `wait` and one is pending; else nullopt when
  // none has finished yet.
  std::optional<ReadResult> poll(bool wait);

 private:
  struct Request {
    int fd;
    char* buffer;
    uint32_t remaining;
    uint64_t offset;
    uint64_t tag;
  };
  void push_sqe(uint32_t index);
  void reap(bool wait);
  void finish(uint32_t index, int error, bool ended_early);

  io_uring ring_{};
  bool uring_ok_ = false;
  std::vector<Request> requests_;    // indexed by the SQE's user_data
  std::vector<uint32_t> free_;       // unused request indexes
  std::deque<Request> waiting_;      // queued while every request index was in use
  std::deque<ReadResult> finished_;  // completed, not yet returned by poll()
  uint32_t pending_ = 0;
  uint32_t unsubmitted_ = 0;  // SQEs prepared since the last io_uring_submit
};

}  // namespace hsring::data
