#include "gpu/noise_schedule.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <stdexcept>
#include <string_view>

#include "common/error.h"

namespace hsring::gpu {

namespace {

constexpr const char* kForms =
    "; use constant (with --noise-std S) or linear:START,END,STEPS, e.g. linear:0.2,0.0,10000";

bool parse_std(std::string_view text, double& value) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size() && std::isfinite(value) &&
         value >= 0 && value <= 1e6;
}

}  // namespace

double NoiseSchedule::std_at(uint64_t step) const {
  if (kind == Kind::kConstant || steps == 0) return kind == Kind::kConstant ? start : end;
  if (step >= steps) return end;
  return start + (end - start) * double(step) / double(steps);
}

std::string NoiseSchedule::describe() const {
  if (kind == Kind::kConstant) return fmt::format("constant, std {:f}", start);
  return fmt::format("linear:{:f},{:f},{}", start, end, steps);
}

NoiseSchedule parse_noise_schedule(const std::string& text, double noise_std) {
  NoiseSchedule schedule;
  if (!std::isfinite(noise_std) || noise_std < 0)
    throw Error(Errc::kUsage,
                fmt::format("--noise-std {:f}: must be a finite value >= 0", noise_std));
  if (text == "constant") {
    schedule.start = noise_std;
    return schedule;
  }
  const std::string_view view(text);
  if (view.substr(0, 7) != "linear:")
    throw Error(Errc::kUsage, "--noise-schedule '" + text + "': unknown schedule" + kForms);
  const std::string_view args = view.substr(7);
  const size_t comma1 = args.find(',');
  const size_t comma2 = comma1 == std::string_view::npos ? comma1 : args.find(',', comma1 + 1);
  if (comma2 == std::string_view::npos || args.find(',', comma2 + 1) != std::string_view::npos)
    throw Error(Errc::kUsage, "--noise-schedule '" + text + "': expected three values" + kForms);
  schedule.kind = NoiseSchedule::Kind::kLinear;
  const std::string_view steps = args.substr(comma2 + 1);
  auto [end, ec] = std::from_chars(steps.data(), steps.data() + steps.size(), schedule.steps);
  if (!parse_std(args.substr(0, comma1), schedule.start) ||
      !parse_std(args.substr(comma1 + 1, comma2 - comma1 - 1), schedule.end) || ec != std::errc() ||
      end != steps.data() + steps.size() || schedule.steps == 0)
    throw Error(Errc::kUsage, "--noise-schedule '" + text +
                                  "': START and END must be stds >= 0 and STEPS a whole number "
                                  ">= 1" +
                                  kForms);
  return schedule;
}

}  // namespace hsring::gpu
