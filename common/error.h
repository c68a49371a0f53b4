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

// A code is its class (the hundreds digit, as ErrorClass numbers them) or, where a caller
// branches on it, a code of its own within that class's range. The message says what went
// wrong in words; a new code is added only for a caller that must tell it apart:
//   kRingNotFound      `hsring stop` / `ring remove` of a ring already gone; the C API
//   kRingExists        Ring::create_or_attach; the C API's name for it
//   kRingBadShape, kRingBadName, kRingProcessBusy   the C API's statuses
//   kModelBadConfig    model_outline_of falls back to the outline of an unsupported config
//   kApiState, kApiShape, kApiUnsupported           the C API's statuses
enum class Errc : uint16_t {
  kUsage = 0,  // a bad flag, config value or request

  kRing = 100,       // the ring segment: create, attach, remove, another process's damage
  kRingNotFound,     // no segment of that name
  kRingExists,       // create: a segment of that name is already there
  kRingBadShape,     // create: an impossible ring shape; attach: an index it lacks
  kRingProcessBusy,  // the process index (or the launcher's lock) is held by a live process
  kRingBadName,      // a name that cannot be a segment's (ring_name_problem)

  kData = 200,  // token shards and corpora: a foreign, damaged or unreadable file, a bad token

  kModel = 300,     // model folders, weight files, inputs that do not fit a model
  kModelBadConfig,  // a model config that is incomplete, inconsistent or unsupported

  kCheckpoint = 400,  // training checkpoints and exports: damaged, locked, a full disk

  kCuda = 500,  // a CUDA or cuBLAS call failed (detail() is the cudaError_t)

  kGroup = 600,  // a drafter group's rendezvous, its files and collectives

  kApiState = 700,  // the C API's misuse: wrong order (publish without a job, a double release)
  kApiShape,        // a buffer's size, shape, dtype or values do not fit the ring
  kApiUnsupported,  // a CUDA entry point of a library built without CUDA

  kSystem = 800,  // a system call failed outside the layers above, or a broken invariant
};

ErrorClass layer_of(Errc code);
// The code's short name: its class's ("data"), or its own ("not-found").
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
