// The one exception type of hsring: a code to branch on, grouped by layer, a message that
// names the problem and what to do about it, and where it applies the file and byte at fault
// and a numeric detail (a cudaError_t). Hot paths return typed results instead; an Error is
// for setup and input checking, caught once in main and turned into an exit code by the one
// table below (exit_code_of), which docs/operations.md lists as "Exit codes".
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

namespace hsring {

// The layer an error belongs to; its code's hundreds digit (Errc's numeric ranges).
enum class ErrorClass {
  kUsage = 0,       // a bad flag, config value or request: the user's to fix
  kRing = 1,        // the ring segment: create, attach, remove, another process's damage
  kData = 2,        // token shards and corpora
  kModel = 3,       // model configs and weight files, inputs that do not fit a model
  kCheckpoint = 4,  // training checkpoints and exports
  kCuda = 5,        // the GPU
  kGroup = 6,       // a drafter group's rendezvous and collectives (NCCL, shared files)
  kApi = 7,         // the C API's own misuse (wrong order, wrong buffer)
  kSystem = 8,      // another system call failed, or a broken invariant
};

enum class Errc : uint16_t {
  // usage 0-99
  kUsage = 0,  // a bad flag, config value or request (was std::invalid_argument)

  // ring / shm 100-199 (was RingErrc)
  kRingNotFound = 100,  // no segment of that name
  kRingExists,          // create: a segment of that name is already there
  kRingForeignOwner,    // the segment belongs to another user
  kRingPermission,      // the OS refused access
  kRingBadMagic,        // not an hsring segment
  kRingBadVersion,      // an hsring segment of another protocol version
  kRingBadLayout,       // header fields inconsistent with each other
  kRingTruncated,       // the segment is smaller than its header says
  kRingBadShape,        // create: an impossible ring shape; attach: an index it lacks
  kRingNoSpace,         // /dev/shm cannot hold the segment
  kRingProcessBusy,     // the process index is held by a live process
  kRingSystem,          // another system call on the ring failed
  kRingBadName,         // a name that cannot be a segment's (ring_name_problem)
  kRingUnsafeMode,      // the segment's file mode is not 0600: others may write it

  // data 200-299 (was data::DataErrc)
  kDataIo = 200,       // a system call on the file failed
  kDataForeign,        // not a token shard (wrong magic)
  kDataBadVersion,     // a token shard of another format version
  kDataBadHeader,      // header fields impossible or inconsistent
  kDataTruncated,      // the file ends before the header says it should
  kDataTrailingBytes,  // the file is longer than the header says
  kDataChecksum,       // a CRC-32 does not match the bytes it covers
  kDataBadOffsets,     // document offsets not 0 .. token_count, non-decreasing
  kDataBadToken,       // a token outside the vocabulary or beyond int32
  kDataBadMask,        // a loss mask with bits set past the last token
  kDataEmptyCorpus,    // no shard, or no token in any shard
  kDataBadOptions,     // impossible packing or reader options

  // model 300-399 (was ModelErrc)
  kModelIo = 300,       // a file is missing or cannot be read or mapped
  kModelBadJson,        // text that is not strict JSON
  kModelBadConfig,      // a model config that is incomplete, inconsistent or unsupported
  kModelBadFile,        // a safetensors file or index whose structure is broken or truncated
  kModelMissingTensor,  // a weight the model needs is in no file
  kModelBadTensor,      // a weight with the wrong shape or dtype
  kModelBadInput,       // a batch, a forward request or a ring shape that does not fit

  // checkpoint 400-499 (was checkpoint::CheckpointErrc)
  kCheckpointIo = 400,           // a system call on the file or directory failed
  kCheckpointNoSpace,            // the file system is full, a quota or a size limit was hit
  kCheckpointLocked,             // another writer holds the checkpoint directory
  kCheckpointForeign,            // not an hsring checkpoint (wrong magic)
  kCheckpointBadVersion,         // a checkpoint of another format version
  kCheckpointBadHeader,          // header fields impossible or inconsistent
  kCheckpointTruncated,          // the file ends before the header says it should
  kCheckpointTrailingBytes,      // the file is longer than the header says
  kCheckpointChecksum,           // a CRC-32 does not match the bytes it covers
  kCheckpointBadTable,           // a metadata or tensor entry is impossible or inconsistent
  kCheckpointNoValidCheckpoint,  // checkpoint files exist but none of them is valid
  kCheckpointBadCheckpoint,      // a Checkpoint value that cannot be written

  // cuda 500-599 (was gpu::CudaError; detail() is the cudaError_t)
  kCuda = 500,  // a CUDA or cuBLAS call failed, or the device cannot do what is asked

  // group / NCCL rendezvous 600-699
  kGroupFile = 600,  // a rendezvous file that is not one (was GroupFileError)
  kGroupRendezvous,  // a drafter group could not form or its collective failed

  // api 700-799 (the C API's own refusals, was capi::ApiError; capi maps every code)
  kApiState = 700,  // wrong order: publish without a job, a double release
  kApiShape,        // a buffer's size, shape, dtype or values do not fit the ring
  kApiUnsupported,  // a CUDA entry point of a library built without CUDA

  // system / internal 800-899
  kSystem = 800,  // a system call failed outside the layers above
  kInternal,      // a broken invariant of hsring itself
};

ErrorClass layer_of(Errc code);
// The code's short name ("not-found", "checksum mismatch", ...), as each layer named it.
const char* to_string(Errc code);
const char* to_string(ErrorClass layer);

// The one table from error class to process exit code, for the workers (worker/worker_main)
// and hsring itself (launcher/main.cc):
//   usage, data, model, checkpoint  2  the inputs are wrong: fix the flag, the model folder,
//                                      the shards or the checkpoint folder and start again
//   ring, cuda, group, api, system  4  setup failed on the machine (segment, GPU, peers)
// An exception that is not an Error counts as system (4) at setup; escaping a worker's run
// it is a bug, kExitInternal (70).
constexpr int exit_code_of(ErrorClass layer) {
  switch (layer) {
    case ErrorClass::kUsage:
    case ErrorClass::kData:
    case ErrorClass::kModel:
    case ErrorClass::kCheckpoint:
      return 2;
    case ErrorClass::kRing:
    case ErrorClass::kCuda:
    case ErrorClass::kGroup:
    case ErrorClass::kApi:
    case ErrorClass::kSystem:
      return 4;
  }
  return 4;
}

class Error : public std::runtime_error {
 public:
  // The message is `what`.
  Error(Errc code, std::string_view what);
  // The message is `what`; `detail` is a number some caller reads (a cudaError_t).
  Error(Errc code, std::string_view what, int64_t detail);
  // About byte `offset` of `path`; the message says "<path>: byte <offset>: <what>".
  Error(Errc code, std::string path, uint64_t offset, std::string_view what);
  // About a whole file or directory; the message says "<path>: <what>".
  Error(Errc code, std::string path, std::string_view what);

  const char* what() const noexcept override { return state_->message.c_str(); }
  Errc code() const { return code_; }
  ErrorClass layer() const { return layer_of(code_); }
  const std::string& path() const { return state_->path; }
  uint64_t offset() const { return offset_; }
  int64_t detail() const { return detail_; }

  // Puts `context` before the message ("--model: " + what), so a caller adds what it knows
  // and rethrows the same object (`throw;`): its code, and so its exit code, stay.
  void prepend(std::string_view context);

 private:
  // Shared, so copying an Error (as throwing does) cannot throw.
  struct State {
    std::string message;
    std::string path;
  };
  Errc code_;
  uint64_t offset_ = 0;
  int64_t detail_ = 0;
  std::shared_ptr<const State> state_;
};

}  // namespace hsring
