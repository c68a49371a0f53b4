#include "checkpoint/checkpoint_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "checkpoint/checkpoint_files.h"
#include "common/crc32.h"
#include "common/error.h"
#include "common/regular_file.h"
#include "common/syscheck.h"
#include "data/read_queue.h"

namespace hsring::checkpoint {

namespace {

class ReadOnlyFile {
 public:
  explicit ReadOnlyFile(const std::string& path) : path_(path) {
    fd_ = open_regular_file(path, Errc::kCheckpoint);
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail_io("fstat", errno, 0);
    size_ = uint64_t(st.st_size);
  }
  ~ReadOnlyFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }

  // Reads up to `size` bytes at `offset`; fewer only at the end of the file.
  size_t read_some(std::byte* out, size_t size, uint64_t offset) const {
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::pread(fd_, out + done, size - done, off_t(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail_io("pread", errno, offset + done);
      if (n == 0) break;
      done += size_t(n);
    }
    return done;
  }

  [[noreturn]] void fail_io(const char* call, int error, uint64_t offset) const {
    throw sys_error(Errc::kCheckpoint, error, path_, offset, call);
  }
  [[noreturn]] void fail_shrank(uint64_t offset) const {
    throw Error(Errc::kCheckpoint, path_, offset,
                "file ended while being read (something is shrinking it)");
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// A byte range of the file to be read into `out`, in file order.
struct Region {
  uint64_t offset;
  uint64_t size;
  std::byte* out;
};

// Reads every region through io_uring, `chunk` bytes per request, `depth` in flight.
void read_regions(const ReadOnlyFile& file, const std::vector<Region>& regions,
                  const ReadOptions& options) {
  const uint64_t chunk = std::max<uint32_t>(options.chunk_bytes, 4096);
  try {
    data::ReadQueue queue(std::max<uint32_t>(options.queue_depth, 1));
    const auto reap = [&](bool wait) {
      while (auto r = queue.poll(wait)) {
        if (r->error != 0) file.fail_io("read", r->error, r->stop_offset);
        if (r->ended_early) file.fail_shrank(r->stop_offset);
        wait = false;
      }
    };
    for (const Region& region : regions) {
      for (uint64_t done = 0; done < region.size; done += chunk) {
        const auto n = uint32_t(std::min(chunk, region.size - done));
        queue.read(file.fd(), region.out + done, n, region.offset + done, 0);
        // Keep at most `depth` queued: the queue would hold the rest in memory otherwise.
        if (queue.pending() >= options.queue_depth) {
          queue.submit();
          reap(true);
        }
      }
    }
    queue.submit();
    while (queue.pending() > 0) reap(true);
  } catch (const Error& e) {
    // The data layer's ReadQueue failed (io_uring_submit): an i/o error of this file.
    if (e.layer() != ErrorClass::kData) throw;
    throw Error(Errc::kCheckpoint, file.path(), e.what());
  }
}

}  // namespace

Checkpoint load_checkpoint(const std::string& path, const ReadOptions& options) {
  const ReadOnlyFile file(path);
  std::vector<std::byte> head(kHeaderSize);
  const size_t got = file.read_some(head.data(), head.size(), 0);
  const CheckpointHeader h = decode_header(head.data(), got, file.size(), path);
  if (const auto step = parse_checkpoint_file_name(std::filesystem::path(path).filename().string());
      step && *step != h.step)
    throw Error(Errc::kCheckpoint, path, kFieldStep,
                fmt::format("the header says step {} but the file name says step {} (renamed by "
                            "hand?)",
                            h.step, *step));

  head.resize(kHeaderSize + h.table_size);
  if (file.read_some(head.data() + kHeaderSize, h.table_size, kHeaderSize) != h.table_size)
    file.fail_shrank(kHeaderSize);
  CheckpointTable table = decode_table(head.data() + kHeaderSize, h, path);

  Checkpoint c;
  c.step = h.step;
  c.metadata = std::move(table.metadata);
  c.tensors.resize(table.tensors.size());
  // Tensor data straight into the tensors; the padding between regions and the footer
  // into `gaps`, each under 64 bytes.
  std::vector<std::byte> gaps((table.tensors.size() + 1) * kDataAlignment + kFooterSize);
  std::vector<Region> regions;
  std::vector<Region> paddings;
  uint64_t end = kHeaderSize + h.table_size;
  std::byte* gap = gaps.data();
  const auto add_padding = [&](uint64_t until) {
    paddings.push_back({end, until - end, gap});
    regions.push_back(paddings.back());
    gap += until - end;
  };
  for (size_t i = 0; i < table.tensors.size(); ++i) {
    TensorEntry& t = table.tensors[i];
    add_padding(t.offset);
    Tensor& out = c.tensors[i];
    out.name = std::move(t.name);
    out.shape = std::move(t.shape);
    out.data.resize(t.element_count);
    regions.push_back({t.offset, t.byte_size(), reinterpret_cast<std::byte*>(out.data.data())});
    end = t.offset + t.byte_size();
  }
  add_padding(h.footer_offset());
  std::byte* footer = gap;
  regions.push_back({h.footer_offset(), kFooterSize, footer});
  read_regions(file, regions, options);

  // The CRC runs over the file in order: header and table, then each region as read.
  uint32_t crc = crc32(head.data(), head.size());
  for (size_t i = 0; i + 1 < regions.size(); ++i)
    crc = crc32_update(crc, regions[i].out, regions[i].size);
  check_footer(footer, crc, h, path);
  for (const Region& p : paddings) check_padding(p.out, p.size, p.offset, path);
  return c;
}

std::optional<LoadedCheckpoint> load_latest(const std::string& dir, const ReadOptions& options) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0)
    throw errno == ENOENT
        ? Error(Errc::kCheckpoint, dir, "the checkpoint directory does not exist")
        : sys_error(Errc::kCheckpoint, errno, dir, "cannot read the checkpoint directory");
  if (!S_ISDIR(st.st_mode)) throw Error(Errc::kCheckpoint, dir, "not a directory");
  const std::vector<CheckpointFile> files = list_checkpoint_files(dir);
  if (files.empty()) return std::nullopt;
  LoadedCheckpoint result;
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    try {
      result.checkpoint = load_checkpoint(it->path, options);
      result.path = it->path;
      return result;
    } catch (const Error& e) {
      if (e.layer() != ErrorClass::kCheckpoint) throw;
      result.rejected.push_back({it->path, e.code(), e.what()});
    }
  }
  std::string reasons;
  for (const RejectedCheckpoint& r : result.rejected) reasons += "\n  " + r.reason;
  const std::string verdict =
      files.size() == 1 ? "the one checkpoint file is not valid"
                        : fmt::format("none of the {} checkpoint files is valid", files.size());
  throw Error(Errc::kCheckpoint, dir,
              verdict +
                  "; refusing to start over from step 0. Repair them, or move them "
                  "away to start a fresh run:" +
                  reasons);
}

}  // namespace hsring::checkpoint
