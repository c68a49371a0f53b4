#include "launcher/worker_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>

#include "common/error.h"
#include "shm/ring_layout.h"

namespace hsring {

namespace {

// Parses a whole decimal number in [0, max]; false on anything else.
bool parse_number(std::string_view text, uint32_t max, uint32_t& value) {
  if (text.empty() || text.size() > 9) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size() && value <= max;
}

}  // namespace

WorkerSpec parse_worker_spec(const std::string& text, const std::string& flag) {
  const std::string forms = fmt::format(
      "; use cpu:N (N CPU workers, 1-{}) or a comma-separated list of GPU ids such as 0,1",
      kMaxProcesses - 1);
  WorkerSpec spec;
  std::string_view view(text);
  if (view.substr(0, 4) == "cpu:") {
    if (!parse_number(view.substr(4), kMaxProcesses - 1, spec.count) || spec.count == 0)
      throw Error(Errc::kUsage, flag + " '" + text + "': bad worker count" + forms);
    return spec;
  }
  spec.cpu = false;
  size_t start = 0;
  while (true) {
    const size_t comma = view.find(',', start);
    const std::string_view item = view.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    uint32_t gpu = 0;
    if (!parse_number(item, 1023, gpu))
      throw Error(Errc::kUsage,
                  flag + " '" + text + "': '" + std::string(item) + "' is not a GPU id" + forms);
    spec.gpus.push_back(int(gpu));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (spec.gpus.size() >= kMaxProcesses)
    throw Error(Errc::kUsage, flag + " '" + text + "': too many workers" + forms);
  spec.count = uint32_t(spec.gpus.size());
  return spec;
}

std::optional<WorkerSplit> gpu_split(int gpus, int target_gpus) {
  if (gpus <= 0) return std::nullopt;
  if (gpus == 1) return WorkerSplit{"0", "0"};
  const int targets = std::clamp(target_gpus, 1, gpus - 1);
  const auto ids = [](int from, int to) {
    std::string list;
    for (int id = from; id < to; ++id) list += (list.empty() ? "" : ",") + std::to_string(id);
    return list;
  };
  return WorkerSplit{ids(0, targets), ids(targets, gpus)};
}

}  // namespace hsring
