// Turns a SIGBUS inside a ring mapping into a clear message and an exit. A segment
// truncated while mapped (`truncate -s 4096 /dev/shm/NAME`) makes every later access to
// the lost pages raise SIGBUS; without this, each process of the run dies by the signal
// with no word of why. A SIGBUS anywhere else keeps its default action.
#pragma once

#include <cstddef>
#include <string>

namespace hsring {

// The exit status of a process whose ring mapping lost its pages (the workers' and the
// launcher's "ring error").
inline constexpr int kExitRingLost = 4;

// Registers [base, base + size) under `name` and, on the first call, installs the
// SIGBUS handler. Up to 16 mappings at once; further ones go unguarded (a short-lived
// tool opening many rings), which only costs the message.
void guard_mapping(const void* base, size_t size, const std::string& name);
// Forgets the mapping that starts at `base`. REQUIRES: before it is unmapped.
void unguard_mapping(const void* base);

}  // namespace hsring
