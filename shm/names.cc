// Names of the ring's enums, for logs, status and errors.
#include "shm/ring_error.h"
#include "shm/ring_layout.h"

namespace hsring {

const char* to_string(SlotPhase phase) {
  switch (phase) {
    case SlotPhase::kFree: return "FREE";
    case SlotPhase::kClaimed: return "CLAIMED";
    case SlotPhase::kWriting: return "WRITING";
    case SlotPhase::kReady: return "READY";
    case SlotPhase::kReading: return "READING";
  }
  return "INVALID";
}

uint32_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return 2;
    case DType::kFP16: return 2;
    case DType::kFP32: return 4;
  }
  return 0;
}

const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return "bf16";
    case DType::kFP16: return "fp16";
    case DType::kFP32: return "fp32";
  }
  return "invalid";
}

const char* to_string(PayloadContent content) {
  switch (content) {
    case PayloadContent::kSynthetic: return "synthetic";
    case PayloadContent::kModel: return "model";
  }
  return "invalid";
}

const char* to_string(Role role) {
  switch (role) {
    case Role::kNone: return "none";
    case Role::kTarget: return "target";
    case Role::kDrafter: return "drafter";
  }
  return "invalid";
}

const char* to_string(ProcessState state) {
  switch (state) {
    case ProcessState::kEmpty: return "never-started";
    case ProcessState::kStarting: return "starting";
    case ProcessState::kRunning: return "running";
    case ProcessState::kDraining: return "draining";
    case ProcessState::kExited: return "exited";
  }
  return "invalid";
}

const char* to_string(Stage stage) {
  switch (stage) {
    case Stage::kTargetForward: return "target.forward";
    case Stage::kTargetEnqueue: return "target.enqueue";
    case Stage::kTargetCopy: return "target.copy";
    case Stage::kTargetPublishWait: return "target.publish_wait";
    case Stage::kDrafterClaimWait: return "drafter.claim_wait";
    case Stage::kDrafterH2D: return "drafter.h2d";
    case Stage::kDrafterNoise: return "drafter.noise";
    case Stage::kDrafterVerify: return "drafter.verify";
    case Stage::kDrafterStep: return "drafter.step";
    case Stage::kCount: break;
  }
  return "invalid";
}

const char* to_string(RingErrc code) {
  switch (code) {
    case RingErrc::kNotFound: return "not-found";
    case RingErrc::kExists: return "exists";
    case RingErrc::kForeignOwner: return "foreign-owner";
    case RingErrc::kPermission: return "permission";
    case RingErrc::kBadMagic: return "bad-magic";
    case RingErrc::kBadVersion: return "bad-version";
    case RingErrc::kBadLayout: return "bad-layout";
    case RingErrc::kTruncated: return "truncated";
    case RingErrc::kBadShape: return "bad-shape";
    case RingErrc::kNoSpace: return "no-space";
    case RingErrc::kProcessBusy: return "process-busy";
    case RingErrc::kSystem: return "system";
  }
  return "invalid";
}

}  // namespace hsring
