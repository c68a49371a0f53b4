#include "checkpoint/checkpoint_writer.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "checkpoint/checkpoint_files.h"
#include "common/crc32.h"
#include "common/error.h"
#include "common/regular_file.h"
#include "common/syscheck.h"

namespace hsring::checkpoint {

namespace fs = std::filesystem;

namespace {

constexpr std::byte kZeros[kDataAlignment] = {};

}  // namespace

CheckpointWriter::CheckpointWriter(std::string dir, WriterOptions options)
    : dir_(std::move(dir)), options_(options) {
  options_.keep_last = std::max<uint32_t>(options_.keep_last, 1);
  // The folders this creates must survive a power loss too, or a run would find no
  // directory and no checkpoint after one: each new folder's parent is fsynced.
  std::error_code ec;
  std::vector<fs::path> created;
  for (fs::path p = fs::absolute(dir_, ec); !ec && !p.empty() && !fs::exists(p, ec);
       p = p.parent_path())
    created.push_back(p);
  if (!ec) fs::create_directories(dir_, ec);
  if (ec)
    throw Error(Errc::kCheckpoint, dir_, "cannot create the checkpoint directory: " + ec.message());
  for (auto it = created.rbegin(); it != created.rend(); ++it)
    sync_directory(it->parent_path().string());
  const std::string lock_path = (fs::path(dir_) / kLockFileName).string();
  // O_NOFOLLOW: a symlink planted at the lock's name would have this process create or
  // lock a file elsewhere; and a FIFO there must not block the open (common/regular_file.h).
  const RegularFileOpen opened =
      try_open_regular_file(lock_path, O_RDWR | O_CREAT | O_NOFOLLOW, 0644);
  lock_fd_ = opened.fd;
  if (lock_fd_ < 0)
    throw Error(Errc::kCheckpoint, lock_path,
                "cannot open the lock file: " + opened.problem +
                    (opened.error == ELOOP ? " (it is a symlink; remove it)"
                     : opened.error == 0   ? " (remove it)"
                                           : ""));
  // flock, not fcntl locks: it belongs to this open file, so a second writer in this same
  // process is refused too, and the kernel drops it when the process dies however it dies.
  int rc;
  do {
    rc = ::flock(lock_fd_, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int error = errno;
    ::close(lock_fd_);
    if (error == EWOULDBLOCK)
      throw Error(Errc::kCheckpoint, dir_,
                  "another writer (a run still alive?) holds " + lock_path +
                      "; two runs must not share a checkpoint directory");
    throw sys_error(Errc::kCheckpoint, error, lock_path, "cannot lock");
  }
  // Holding the lock, every temporary here is a dead writer's.
  remove_temporary_files(dir_);
}

CheckpointWriter::~CheckpointWriter() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

std::string CheckpointWriter::write(const Checkpoint& c) {
  // `plan` and `footer` are declared before `file`, so they outlive the writes in flight
  // when an exception unwinds.
  const CheckpointPlan plan = plan_checkpoint(c);
  std::array<std::byte, kFooterSize> footer{};
  const std::string name = checkpoint_file_name(c.step);
  std::string path = (fs::path(dir_) / name).string();
  AtomicFile file(path, plan.file_size, options_.io);
  used_io_uring_ = file.uses_io_uring();

  // The CRC is computed chunk by chunk right after each chunk is handed to the kernel, so
  // it overlaps the writes.
  file.write(plan.head.data(), plan.head.size(), 0);
  uint32_t crc = crc32(plan.head.data(), plan.head.size());
  uint64_t end = plan.head.size();
  const uint64_t chunk = std::max<uint32_t>(options_.io.chunk_bytes, 4096);
  for (size_t i = 0; i < c.tensors.size(); ++i) {
    const uint64_t offset = plan.tensor_offsets[i];
    crc = crc32_update(crc, kZeros, offset - end);  // the gap reads back as zeros
    const auto* bytes = reinterpret_cast<const std::byte*>(c.tensors[i].data.data());
    const uint64_t size = c.tensors[i].data.size() * sizeof(float);
    for (uint64_t done = 0; done < size; done += chunk) {
      const uint64_t n = std::min(chunk, size - done);
      file.write(bytes + done, n, offset + done);
      crc = crc32_update(crc, bytes + done, n);
    }
    end = offset + size;
  }
  const uint64_t footer_offset = plan.file_size - kFooterSize;
  crc = crc32_update(crc, kZeros, footer_offset - end);
  footer = encode_footer(crc);
  file.write(footer.data(), footer.size(), footer_offset);
  file.commit();

  // The new checkpoint is durable: only now may older ones go.
  remove_old(c.step);
  return path;
}

void CheckpointWriter::remove_old(uint64_t newest_step) {
  const std::vector<CheckpointFile> files = list_checkpoint_files(dir_);
  std::vector<const CheckpointFile*> doomed;
  uint32_t kept = 0;
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    // The same step under another spelling of the name ("step-5.hsckpt") goes too.
    const bool newer = it->step > newest_step ||
                       (it->step == newest_step &&
                        fs::path(it->path).filename() != checkpoint_file_name(newest_step));
    if (!newer && kept < options_.keep_last) {
      ++kept;
    } else {
      doomed.push_back(&*it);
    }
  }
  if (doomed.empty()) return;
  for (const CheckpointFile* f : doomed)
    if (::unlink(f->path.c_str()) != 0 && errno != ENOENT)
      throw Error(Errc::kCheckpoint, f->path,
                  fmt::format("cannot remove an old checkpoint: {} (the new checkpoint of step {} "
                              "is written)",
                              errno_text(errno), newest_step));
  sync_directory(dir_);
}

}  // namespace hsring::checkpoint
