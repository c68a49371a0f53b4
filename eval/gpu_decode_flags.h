// `--gpu` and `--gpu-group`, declared once for the commands that decode on a GPU many
// prompts at a time: `hsring eval` and `hsring data generate`.
#pragma once

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace hsring::eval {

// Adds --gpu N (into `gpu`, which stays -1, the CPU, when it is not given), described by
// `gpu_help`, and --gpu-group (prompts decoded together; its default is what `group`
// holds) to `command`.
void add_gpu_decode_flags(CLI::App& command, int& gpu, uint32_t& group,
                          const std::string& gpu_help);

}  // namespace hsring::eval
