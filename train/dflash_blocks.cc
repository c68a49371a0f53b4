#include "train/dflash_blocks.h"

#include <algorithm>
#include <string>

#include "common/doc_offsets.h"
#include "common/error.h"
#include "common/random.h"

namespace hsring::train {

namespace {

void check_documents(std::span<const int32_t> doc_offsets, size_t rows, uint32_t block_size) {
  const auto bad = [](const std::string& what) {
    throw Error(Errc::kModel, "dflash anchors: " + what);
  };
  if (block_size < 2) bad("block_size must be at least 2");
  if (const std::string problem = doc_partition_problem(doc_offsets, rows, "label count");
      !problem.empty())
    bad(problem);
}

}  // namespace

std::vector<int32_t> anchor_candidates(std::span<const int32_t> doc_offsets,
                                       std::span<const int32_t> labels, uint32_t block_size) {
  check_documents(doc_offsets, labels.size(), block_size);
  std::vector<int32_t> out;
  for (size_t d = 0; d + 1 < doc_offsets.size(); ++d) {
    const int64_t s = doc_offsets[d], e = doc_offsets[d + 1];
    for (int64_t a = s + 1; anchor_in_document(a, s, e); ++a)
      if (labels[size_t(a) - 1] >= 0 && labels[size_t(a)] >= 0) out.push_back(int32_t(a));
  }
  return out;
}

std::vector<int32_t> sample_anchors(std::span<const int32_t> doc_offsets,
                                    std::span<const int32_t> labels, uint32_t block_size,
                                    size_t count, uint64_t seed) {
  std::vector<int32_t> all = anchor_candidates(doc_offsets, labels, block_size);
  if (count >= all.size()) return all;
  // Partial Fisher-Yates: the first `count` entries are a uniform sample without repeats.
  uint64_t state = mix64(seed ^ 0xA2C402A2C402ull);
  for (size_t i = 0; i < count; ++i)
    std::swap(all[i], all[i + splitmix64(state) % (all.size() - i)]);
  all.resize(count);
  std::sort(all.begin(), all.end());
  return all;
}

size_t default_anchor_count(size_t tokens) { return std::max<size_t>(1, tokens * 512 / 16384); }

size_t accepted_prefix(std::span<const int32_t> labels, std::span<const int32_t> predictions) {
  size_t accepted = 0;
  while (accepted < labels.size() && labels[accepted] >= 0 &&
         predictions[accepted] == labels[accepted])
    ++accepted;
  return accepted;
}

}  // namespace hsring::train
