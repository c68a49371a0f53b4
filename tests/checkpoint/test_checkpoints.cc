#include "test_checkpoints.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "common/crc32.h"

namespace hsring::checkpoint::test {

namespace fs = std::filesystem;

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  path_ = (fs::temp_directory_path() / ("hsring-checkpoint-test-" + std::to_string(::getpid()) +
                                        "-" + std::to_string(counter.fetch_add(1))))
              .string();
  fs::remove_all(path_);  // a stale folder of an earlier process with this pid
  fs::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

Checkpoint random_checkpoint(std::mt19937_64& rng, uint64_t step, int tensors, int max_elements) {
  Checkpoint c;
  c.step = step;
  c.metadata["run_id"] = "run-" + std::to_string(rng() % 1000);
  c.set_u64("data_position.drafter0", rng() % 100000);
  std::string rng_state(16 + rng() % 16, '\0');
  for (char& b : rng_state) b = char(rng());  // binary, zeros included
  c.metadata["rng_state"] = rng_state;
  c.metadata["config"] = "lr = 3e-4\nbatch_tokens = 8192\n";
  for (int i = 0; i < tensors; ++i) {
    Tensor t;
    t.name = "layer" + std::to_string(i) + (i % 3 == 0 ? ".adam_m" : ".weight");
    const int rank = int(rng() % 4);
    size_t count = 1;
    for (int d = 0; d < rank; ++d) {
      const auto dim = int64_t(1 + rng() % std::max(1, max_elements / 8));
      if (count * size_t(dim) > size_t(max_elements)) break;
      t.shape.push_back(dim);
      count *= size_t(dim);
    }
    if (i == 1) t.shape = {0, 5};  // an empty tensor
    count = 1;
    for (int64_t d : t.shape) count *= size_t(d);
    t.data.resize(count);
    for (float& v : t.data) {
      const uint64_t r = rng();
      v = r % 16 == 0 ? std::bit_cast<float>(uint32_t(r >> 32))  // any bit pattern
                      : float(int64_t(r % 20001) - 10000) / 997.0f;
    }
    c.tensors.push_back(std::move(t));
  }
  return c;
}

std::vector<std::byte> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), {});
  std::vector<std::byte> out(chars.size());
  if (!chars.empty()) std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

void write_bytes(const std::string& path, const std::byte* bytes, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes), std::streamsize(size));
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::vector<std::string> list_names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

void reseal(std::vector<std::byte>& f) {
  const auto put = [&](uint64_t at, uint32_t crc) { std::memcpy(f.data() + at, &crc, 4); };
  if (f.size() < kHeaderSize) return;
  uint64_t table_size = 0;
  std::memcpy(&table_size, f.data() + kFieldTableSize, 8);
  if (table_size <= f.size() - kHeaderSize)
    put(kFieldTableCrc, crc32(f.data() + kHeaderSize, table_size));
  put(kFieldHeaderCrc, crc32(f.data(), kFieldHeaderCrc));
  if (f.size() >= kHeaderSize + kFooterSize) put(f.size() - 4, crc32(f.data(), f.size() - 4));
}

}  // namespace hsring::checkpoint::test
