// HSRING_REQUIRE(condition): the check behind a `REQUIRES:` comment. A violated contract
// is a bug in the caller, not an input error, so it aborts naming the condition and where.
// Active in the sanitizer builds (cmake/Sanitizers.cmake defines HSRING_CHECK_CONTRACTS),
// in builds without NDEBUG, and with -DHSRING_CHECK_CONTRACTS=ON; compiled out of release
// builds, so a hot path pays nothing for it. The condition must have no side effects.
#pragma once

#if defined(HSRING_CHECK_CONTRACTS) || !defined(NDEBUG)
#define HSRING_CONTRACTS_ACTIVE 1
#else
#define HSRING_CONTRACTS_ACTIVE 0
#endif

namespace hsring {

// Writes "contract violated: CONDITION (FILE:LINE)" to stderr and aborts.
[[noreturn]] void contract_violated(const char* condition, const char* file, int line) noexcept;

}  // namespace hsring

#if HSRING_CONTRACTS_ACTIVE
#define HSRING_REQUIRE(condition) \
  ((condition) ? void(0) : ::hsring::contract_violated(#condition, __FILE__, __LINE__))
#else
// Unevaluated, so the condition still compiles (and its names count as used).
#define HSRING_REQUIRE(condition) void(sizeof(bool(condition)))
#endif
