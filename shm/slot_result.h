// What a ring operation did, as a type: the claims (claim_free_slot, claim_ready_slot) and
// the transitions of a held slot (bind, publish, release...) return one of these instead
// of throwing or of a bare bool/optional, so a caller tells "nothing yet" (timeout) from
// "the run stops" from "the slot was taken from us" without guessing.
#pragma once

#include <cstdint>

#include "common/contract.h"
#include "shm/slot_claim.h"

namespace hsring {

enum class SlotStatus : uint8_t {
  kOk,        // claimed, or the transition happened
  kTimedOut,  // a claim: no slot within the timeout; the run goes on, try again
  kStopping,  // a claim: the run stops (producers: it drains; consumers: it stopped)
  kLost,      // a transition: the slot is no longer ours (recovered from us, or the claim
              // is in another phase); the caller was presumed dead and must exit
};
const char* to_string(SlotStatus status);

// The result of a transition of a held slot: kOk or kLost.
class [[nodiscard]] SlotResult {
 public:
  constexpr SlotResult() = default;
  constexpr explicit SlotResult(SlotStatus status) : status_(status) {}
  static constexpr SlotResult ok_or_lost(bool ok) {
    return SlotResult(ok ? SlotStatus::kOk : SlotStatus::kLost);
  }
  constexpr SlotStatus status() const { return status_; }
  constexpr bool ok() const { return status_ == SlotStatus::kOk; }
  constexpr bool lost() const { return status_ == SlotStatus::kLost; }
  constexpr explicit operator bool() const { return ok(); }

 private:
  SlotStatus status_ = SlotStatus::kOk;
};

// The result of a claim: kOk with the claim, else kTimedOut or kStopping. Reads like the
// optional it replaces (`if (!claim) ...; claim->index`), plus status().
class [[nodiscard]] ClaimResult {
 public:
  constexpr ClaimResult() = default;
  constexpr explicit ClaimResult(SlotClaim claim) : status_(SlotStatus::kOk), claim_(claim) {}
  static constexpr ClaimResult timed_out() { return ClaimResult(SlotStatus::kTimedOut); }
  static constexpr ClaimResult stopping() { return ClaimResult(SlotStatus::kStopping); }

  constexpr SlotStatus status() const { return status_; }
  constexpr bool ok() const { return status_ == SlotStatus::kOk; }
  constexpr explicit operator bool() const { return ok(); }
  // REQUIRES: ok().
  SlotClaim& operator*() {
    HSRING_REQUIRE(ok());
    return claim_;
  }
  const SlotClaim& operator*() const {
    HSRING_REQUIRE(ok());
    return claim_;
  }
  SlotClaim* operator->() { return &**this; }
  const SlotClaim* operator->() const { return &**this; }

 private:
  constexpr explicit ClaimResult(SlotStatus status) : status_(status) {}

  SlotStatus status_ = SlotStatus::kTimedOut;
  SlotClaim claim_;
};

}  // namespace hsring
