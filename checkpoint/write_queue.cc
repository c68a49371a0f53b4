#include "checkpoint/write_queue.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>

#include "common/tsan_liburing.h"

namespace hsring::checkpoint {

namespace {

// The user_data of the fsync SQE: never a request index.
constexpr uint64_t kSyncTag = ~0ull;
constexpr uint32_t kSyncIndex = ~0u;

}  // namespace

WriteQueue::WriteQueue(uint32_t capacity, uint32_t chunk_bytes, bool try_io_uring)
    : chunk_bytes_(std::max<uint32_t>(chunk_bytes, 4096)) {
  capacity = std::max<uint32_t>(capacity, 1);
  requests_.resize(capacity);
  for (uint32_t i = capacity; i-- > 0;) free_.push_back(i);
  // The SQ holds `capacity` entries and the CQ twice that; at most `capacity` requests (or
  // the one fsync) are in the kernel, so the completion queue never overflows.
  uring_ok_ = try_io_uring && io_uring_queue_init(capacity, &ring_, 0) == 0;
}

WriteQueue::~WriteQueue() {
  if (!uring_ok_) return;
  // io_uring_queue_exit does not wait for requests: the kernel could still read buffers
  // the caller frees next.
  wait_all();
  io_uring_queue_exit(&ring_);
}

void WriteQueue::fail(int error, uint64_t offset, const char* call) {
  if (!failure_) failure_ = WriteFailure{error, offset, call};
}

void WriteQueue::write(int fd, const void* bytes, size_t size, uint64_t offset) {
  const auto* p = static_cast<const char*>(bytes);
  while (size > 0 && !failure_) {
    const auto n = uint32_t(std::min<size_t>(size, chunk_bytes_));
    if (!uring_ok_) {
      const ssize_t done = ::pwrite(fd, p, n, off_t(offset));
      if (done < 0 && errno == EINTR) continue;
      if (done <= 0) {  // 0 bytes for a non-empty write: no progress, report no space
        fail(done < 0 ? errno : ENOSPC, offset, "pwrite");
        return;
      }
      // A short write (a signal, or a file size limit reached) continues after the bytes
      // written; the next call reports why it stopped.
      p += done;
      size -= size_t(done);
      offset += uint64_t(done);
      continue;
    }
    while (free_.empty() && !failure_) reap_one();
    if (failure_) return;
    const uint32_t index = free_.back();
    free_.pop_back();
    requests_[index] = Request{fd, p, n, offset};
    push_sqe(index);
    // Hand each chunk over at once, so the kernel writes while the caller goes on (the
    // checkpoint writer computes its CRC in the meantime).
    submit();
    p += n;
    size -= n;
    offset += n;
  }
}

void WriteQueue::push_sqe(uint32_t index) {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) {  // SQ full of unsubmitted entries: hand them over, then retry
    submit();
    sqe = io_uring_get_sqe(&ring_);
  }
  const Request& r = requests_[index];
  io_uring_prep_write(sqe, r.fd, r.bytes, r.remaining, r.offset);
  io_uring_sqe_set_data64(sqe, index);
  prepared_.push_back(index);
}

void WriteQueue::submit() {
  while (!prepared_.empty()) {
    const int rc = io_uring_submit(&ring_);
    if (rc == -EINTR) continue;
    if (rc <= 0) {
      // The prepared SQEs never reached the kernel, so no completion will come for them:
      // their indexes are free again. They stay in the SQ, but nothing submits after a
      // failure (write() drops, sync() returns early), so they are never run.
      fail(rc < 0 ? -rc : EIO, 0, "io_uring_submit");
      for (const uint32_t index : prepared_)
        if (index != kSyncIndex) free_.push_back(index);
      prepared_.clear();
      return;
    }
    // The kernel consumes SQEs in order; a short count leaves the newest ones prepared.
    prepared_.erase(prepared_.begin(),
                    prepared_.begin() + std::min<ptrdiff_t>(rc, ptrdiff_t(prepared_.size())));
  }
}

void WriteQueue::reap_one() {
  io_uring_cqe* cqe = nullptr;
  int rc;
  do {
    rc = io_uring_wait_cqe(&ring_, &cqe);
  } while (rc == -EINTR);
  if (rc < 0) {
    // The ring itself failed: no completion will come for the requests in flight.
    fail(-rc, 0, "io_uring_wait_cqe");
    free_.clear();
    for (uint32_t i = 0; i < requests_.size(); ++i) free_.push_back(i);
    return;
  }
  const uint64_t tag = io_uring_cqe_get_data64(cqe);
  const int res = cqe->res;
  io_uring_cqe_seen(&ring_, cqe);
  if (tag == kSyncTag) {
    if (res < 0) fail(-res, 0, "fsync");
    return;
  }
  const auto index = uint32_t(tag);
  Request& r = requests_[index];
  if ((res == -EINTR || res == -EAGAIN) && !failure_) {
    push_sqe(index);
    submit();
    return;
  }
  if (res < 0 || (res == 0 && r.remaining > 0)) {
    // A write of 0 bytes makes no progress; report it as ENOSPC would, not loop.
    fail(res < 0 ? -res : ENOSPC, r.offset, "write");
  } else if (uint32_t(res) < r.remaining && !failure_) {  // short write: go on after it
    r.bytes += res;
    r.remaining -= uint32_t(res);
    r.offset += uint64_t(res);
    push_sqe(index);
    submit();
    return;
  }
  free_.push_back(index);
}

std::optional<WriteFailure> WriteQueue::wait_all() {
  if (uring_ok_) {
    submit();
    while (free_.size() < requests_.size()) reap_one();
  }
  return failure_;
}

std::optional<WriteFailure> WriteQueue::sync(int fd) {
  if (wait_all()) return failure_;
  if (!uring_ok_) {
    if (::fsync(fd) != 0) fail(errno, 0, "fsync");
    return failure_;
  }
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  io_uring_prep_fsync(sqe, fd, 0);
  io_uring_sqe_set_data64(sqe, kSyncTag);
  prepared_.push_back(kSyncIndex);
  submit();
  if (failure_) return failure_;
  reap_one();
  return failure_;
}

}  // namespace hsring::checkpoint
