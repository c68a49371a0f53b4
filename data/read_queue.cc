#include "data/read_queue.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"
#include "common/syscheck.h"
#include "common/tsan_liburing.h"

namespace hsring::data {

ReadQueue::ReadQueue(uint32_t capacity) {
  if (capacity == 0) throw Error(Errc::kData, "read queue capacity must be > 0");
  requests_.resize(capacity);
  for (uint32_t i = capacity; i-- > 0;) free_.push_back(i);
  // The SQ holds `capacity` entries and the CQ twice that, so the requests in the kernel
  // (at most `capacity`) can never overflow the completion queue.
  uring_ok_ = io_uring_queue_init(capacity, &ring_, 0) == 0;
}

ReadQueue::~ReadQueue() {
  if (!uring_ok_) return;
  // The kernel may still be writing into callers' buffers: wait for every request before
  // the ring goes, since io_uring_queue_exit does not wait for them.
  try {
    while (free_.size() < requests_.size()) reap(true);
  } catch (const Error&) {
    // A failing submit leaves nothing more we can wait for.
  }
  io_uring_queue_exit(&ring_);
}

void ReadQueue::read(int fd, void* buffer, uint32_t size, uint64_t offset, uint64_t tag) {
  ++pending_;
  Request request{fd, static_cast<char*>(buffer), size, offset, tag};
  if (!uring_ok_) {
    ReadResult result{tag};
    while (request.remaining > 0) {
      const ssize_t n = ::pread(fd, request.buffer, request.remaining, off_t(request.offset));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        result.error = n < 0 ? errno : 0;
        result.ended_early = n == 0;
        break;
      }
      request.buffer += n;
      request.remaining -= uint32_t(n);
      request.offset += uint64_t(n);
    }
    result.stop_offset = request.offset;
    finished_.push_back(result);
    return;
  }
  if (free_.empty()) {
    waiting_.push_back(request);
    return;
  }
  const uint32_t index = free_.back();
  free_.pop_back();
  requests_[index] = request;
  push_sqe(index);
}

void ReadQueue::push_sqe(uint32_t index) {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) {  // SQ full of unsubmitted entries: hand them over, then retry
    submit();
    sqe = io_uring_get_sqe(&ring_);
  }
  const Request& r = requests_[index];
  io_uring_prep_read(sqe, r.fd, r.buffer, r.remaining, r.offset);
  io_uring_sqe_set_data64(sqe, index);
  ++unsubmitted_;
}

void ReadQueue::submit() {
  if (!uring_ok_ || unsubmitted_ == 0) return;
  int rc;
  do {
    rc = io_uring_submit(&ring_);
  } while (rc == -EINTR);
  if (rc < 0) throw sys_error(Errc::kData, -rc, "io_uring_submit");
  unsubmitted_ = 0;
}

void ReadQueue::finish(uint32_t index, int error, bool ended_early) {
  const Request& r = requests_[index];
  finished_.push_back(ReadResult{r.tag, error, ended_early, r.offset});
  if (!waiting_.empty()) {  // the freed index goes straight to the oldest waiting read
    requests_[index] = waiting_.front();
    waiting_.pop_front();
    push_sqe(index);
  } else {
    free_.push_back(index);
  }
}

void ReadQueue::reap(bool wait) {
  submit();
  io_uring_cqe* cqe = nullptr;
  if (wait) {
    int rc;
    do {
      rc = io_uring_wait_cqe(&ring_, &cqe);
    } while (rc == -EINTR);
    if (rc < 0) throw sys_error(Errc::kData, -rc, "io_uring_wait_cqe");
  }
  while (io_uring_peek_cqe(&ring_, &cqe) == 0 && cqe != nullptr) {
    const auto index = uint32_t(io_uring_cqe_get_data64(cqe));
    const int res = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    Request& r = requests_[index];
    if (res == -EINTR || res == -EAGAIN) {
      push_sqe(index);
    } else if (res < 0) {
      finish(index, -res, false);
    } else if (res == 0 && r.remaining > 0) {
      finish(index, 0, true);
    } else if (uint32_t(res) < r.remaining) {  // short read: continue where it stopped
      r.buffer += res;
      r.remaining -= uint32_t(res);
      r.offset += uint64_t(res);
      push_sqe(index);
    } else {
      r.offset += uint64_t(res);
      r.remaining = 0;
      finish(index, 0, false);
    }
  }
  submit();  // continuations and reads that were waiting for an index
}

std::optional<ReadResult> ReadQueue::poll(bool wait) {
  if (uring_ok_) {
    reap(false);
    while (wait && finished_.empty() && free_.size() < requests_.size()) reap(true);
  }
  if (finished_.empty()) return std::nullopt;
  ReadResult result = finished_.front();
  finished_.pop_front();
  --pending_;
  return result;
}

}  // namespace hsring::data
