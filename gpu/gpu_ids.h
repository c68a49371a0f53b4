// Whether a GPU id names a device, given how many this process can see: plain C++, so the
// launcher's preflight can check ids against measured (or, in tests, made-up) counts in
// every build, with the same message the workers give.
#pragma once

#include <string>

namespace hsring::gpu {

// "" when 0 <= id < count, else "GPU 7 does not exist: this machine has 2 GPUs (0-1)", or,
// with count 0, a message that carries `why_none` (what CUDA said) and what to do.
std::string missing_gpu_problem(int id, int count, const std::string& why_none);

}  // namespace hsring::gpu
