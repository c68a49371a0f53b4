// Helpers of the checkpoint tests: a temporary directory, random checkpoints, raw files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_format.h"

namespace hsring::checkpoint::test {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A checkpoint of step `step` with a few metadata entries (one binary) and `tensors`
// tensors of random shapes up to `max_elements` elements each, random bit patterns
// included (NaNs, infinities, signed zeros).
Checkpoint random_checkpoint(std::mt19937_64& rng, uint64_t step, int tensors, int max_elements);

std::vector<std::byte> read_bytes(const std::string& path);
void write_bytes(const std::string& path, const std::byte* bytes, size_t size);
inline void write_bytes(const std::string& path, const std::vector<std::byte>& bytes) {
  write_bytes(path, bytes.data(), bytes.size());
}
// The names of the entries of `dir`, sorted.
std::vector<std::string> list_names(const std::string& dir);

// Rewrites the header, table and file CRCs of an encoded checkpoint after a mutation, so
// the checks behind them are reached. Leaves the bytes alone where the header is too
// damaged to find the table or the footer.
void reseal(std::vector<std::byte>& file);

}  // namespace hsring::checkpoint::test
