// Parsing of --targets / --drafters: "cpu:N" for N CPU-mode workers, or a list of GPU ids
// ("0,1,2") for one worker per listed GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hsring {

struct WorkerSpec {
  bool cpu = true;
  uint32_t count = 0;
  std::vector<int> gpus;  // one entry per worker when !cpu; ids may repeat
};

// Throws std::invalid_argument whose message names `flag`, the bad text, and the forms
// that are accepted.
WorkerSpec parse_worker_spec(const std::string& text, const std::string& flag);

}  // namespace hsring
