// Reads checkpoints back: one file, checked completely (header, table, every byte under
// the file CRC), or the newest valid one of a directory, falling back past damaged ones
// and saying which and why. A damaged checkpoint is never taken for "no checkpoint".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_format.h"
#include "common/error.h"

namespace hsring::checkpoint {

struct ReadOptions {
  uint32_t queue_depth = 8;         // reads in flight at once (io_uring)
  uint32_t chunk_bytes = 8u << 20;  // the size of each
};

// Reads and checks checkpoint file `path`. When its name is `step-<N>.hsckpt`, the step
// in its header must be N. Throws Error (I/O, and every decoding error of
// decode_checkpoint) naming the file, the byte and what is wrong.
Checkpoint load_checkpoint(const std::string& path, const ReadOptions& options = {});

struct RejectedCheckpoint {
  std::string path;
  Errc code = Errc::kCheckpoint;
  std::string reason;  // the Error's message
};

struct LoadedCheckpoint {
  Checkpoint checkpoint;
  std::string path;
  // Newer checkpoint files that were skipped, newest first: a caller must log these.
  std::vector<RejectedCheckpoint> rejected;
};

// The newest checkpoint of `dir` that is valid, trying its step files from the highest
// step down; temporaries and other files are ignored (and never removed: a writer may be
// writing them). Returns nullopt when `dir` holds no checkpoint file.
// Throws Error: no valid checkpoint when checkpoint files exist and none is valid
// (the message lists each with its reason), I/O when `dir` is missing or unreadable.
std::optional<LoadedCheckpoint> load_latest(const std::string& dir,
                                            const ReadOptions& options = {});

}  // namespace hsring::checkpoint
