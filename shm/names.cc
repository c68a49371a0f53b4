// Names of the ring's enums, for logs, status and errors, and which ring names can be one.
#include <fmt/format.h>

#include <climits>

#include "common/error.h"
#include "shm/ring.h"
#include "shm/ring_layout.h"
#include "shm/slot_result.h"

namespace hsring {

namespace {

// The length of a valid UTF-8 sequence starting at `at`, or 0 (overlong forms, surrogates
// and code points past U+10FFFF included).
size_t utf8_sequence_length(const std::string& s, size_t at) {
  const auto byte = [&](size_t i) { return uint8_t(s[i]); };
  const uint8_t lead = byte(at);
  if (lead < 0x80) return 1;
  size_t length;
  uint32_t code;
  if ((lead & 0xE0) == 0xC0)
    length = 2, code = lead & 0x1F;
  else if ((lead & 0xF0) == 0xE0)
    length = 3, code = lead & 0x0F;
  else if ((lead & 0xF8) == 0xF0)
    length = 4, code = lead & 0x07;
  else
    return 0;
  if (at + length > s.size()) return 0;
  for (size_t i = 1; i < length; ++i) {
    if ((byte(at + i) & 0xC0) != 0x80) return 0;
    code = (code << 6) | (byte(at + i) & 0x3F);
  }
  static constexpr uint32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
  if (code < kSmallest[length] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return 0;
  return length;
}

}  // namespace

// Each segment is a file /dev/shm/NAME, and a ring of CPU drafters has NAME-grads beside
// it: both must be one directory entry of at most NAME_MAX bytes. Names also appear in
// JSON and Prometheus labels, which need UTF-8, and in logs, where a control character
// would forge or hide a line.
std::string ring_name_problem(const std::string& name) {
  if (name.empty()) return "a ring name cannot be empty";
  if (name == "." || name == "..")
    return "'" + name + "' names a directory, not a segment: pick another ring name";
  const size_t limit = kMaxRingNameBytes;
  if (name.size() > limit)
    return fmt::format(
        "a ring name of {} bytes is too long: at most {} (NAME_MAX {} less the '{}' of the "
        "segment beside it)",
        name.size(), limit, NAME_MAX, kGradientSegmentSuffix);
  for (size_t i = 0; i < name.size();) {
    const auto c = uint8_t(name[i]);
    if (c == '/')
      return fmt::format(
          "a ring name cannot contain '/' (byte {}): it is one file in /dev/shm, not a path", i);
    if (c < 0x20 || c == 0x7F)
      return fmt::format("a ring name cannot contain a control character (0x{:02x} at byte {})", c,
                         i);
    const size_t length = utf8_sequence_length(name, i);
    if (length == 0)
      return fmt::format(
          "a ring name must be UTF-8 (byte {} is not): it appears in JSON and Prometheus labels",
          i);
    i += length;
  }
  return "";
}

const char* to_string(SlotPhase phase) {
  switch (phase) {
    case SlotPhase::kFree:
      return "FREE";
    case SlotPhase::kClaimed:
      return "CLAIMED";
    case SlotPhase::kWriting:
      return "WRITING";
    case SlotPhase::kReady:
      return "READY";
    case SlotPhase::kReading:
      return "READING";
  }
  return "INVALID";
}

const char* to_string(PayloadContent content) {
  switch (content) {
    case PayloadContent::kSynthetic:
      return "synthetic";
    case PayloadContent::kModel:
      return "model";
  }
  return "invalid";
}

const char* to_string(Role role) {
  switch (role) {
    case Role::kNone:
      return "none";
    case Role::kTarget:
      return "target";
    case Role::kDrafter:
      return "drafter";
  }
  return "invalid";
}

const char* to_string(ProcessState state) {
  switch (state) {
    case ProcessState::kEmpty:
      return "never-started";
    case ProcessState::kStarting:
      return "starting";
    case ProcessState::kRunning:
      return "running";
    case ProcessState::kDraining:
      return "draining";
    case ProcessState::kExited:
      return "exited";
  }
  return "invalid";
}

const char* to_string(Stage stage) {
  switch (stage) {
    case Stage::kTargetForward:
      return "target.forward";
    case Stage::kTargetEnqueue:
      return "target.enqueue";
    case Stage::kTargetCopy:
      return "target.copy";
    case Stage::kTargetPublishWait:
      return "target.publish_wait";
    case Stage::kDrafterClaimWait:
      return "drafter.claim_wait";
    case Stage::kDrafterH2D:
      return "drafter.h2d";
    case Stage::kDrafterNoise:
      return "drafter.noise";
    case Stage::kDrafterVerify:
      return "drafter.verify";
    case Stage::kDrafterStep:
      return "drafter.step";
    case Stage::kCount:
      break;
  }
  return "invalid";
}

const char* to_string(SlotStatus status) {
  switch (status) {
    case SlotStatus::kOk:
      return "ok";
    case SlotStatus::kTimedOut:
      return "timed out";
    case SlotStatus::kStopping:
      return "stopping";
    case SlotStatus::kLost:
      return "lost";
  }
  return "?";
}

}  // namespace hsring
