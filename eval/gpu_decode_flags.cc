#include "eval/gpu_decode_flags.h"

#include <CLI/CLI.hpp>

namespace hsring::eval {

void add_gpu_decode_flags(CLI::App& command, int& gpu, uint32_t& group,
                          const std::string& gpu_help) {
  command.add_option("--gpu", gpu, gpu_help)->check(CLI::NonNegativeNumber);
  command.add_option("--gpu-group", group, "With --gpu: prompts decoded together")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
}

}  // namespace hsring::eval
