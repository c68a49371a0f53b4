// One shard on disk: what opening it learns (header and document offsets, both checked),
// and the full check of its tokens against their checksum and vocabulary, and of its loss
// mask, if it has one, against its checksum and padding.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/file_stream.h"
#include "data/shard_format.h"

namespace hsring::data {

struct ShardInfo {
  std::string path;
  ShardHeader header;
  std::vector<uint64_t> doc_offsets;  // doc_count + 1 token indexes, cu_seqlens style
};

// Reads and checks the header, the file size and the offset table of `path`; the tokens
// are not read. Throws Error naming the file and byte.
ShardInfo read_shard_info(const std::string& path);

// What the full check of a shard counted.
struct ShardCheck {
  uint64_t counted_tokens = 0;  // tokens the loss mask counts; every token without a mask
};

// Reads every token of `shard` (io_uring, `options.depth` chunks in flight), checks the
// token CRC and that each token is in the vocabulary, then the loss mask's CRC and that its
// padding bits are zero. Throws Error (checksum, bad token naming the token's byte,
// bad mask naming the mask byte, truncated, I/O).
ShardCheck verify_shard_tokens(const ShardInfo& shard, const StreamOptions& options = {});

// The largest token value a shard may hold (vocabulary, else int32 / the width allows).
uint64_t max_token_of(const ShardHeader& header);

}  // namespace hsring::data
