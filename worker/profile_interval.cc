#include "worker/profile_interval.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "common/error.h"

namespace hsring {

namespace {

// "" when `text` is a valid interval (stored in `seconds`), else why not.
std::string interval_problem(const std::string& text, double& seconds) {
  char* end = nullptr;
  seconds = std::strtod(text.c_str(), &end);
  const bool number = !text.empty() && end == text.c_str() + text.size() && std::isfinite(seconds);
  if (number &&
      (seconds == 0 || (seconds >= kMinProfileIntervalS && seconds <= kMaxProfileIntervalS)))
    return "";
  char range[64];
  std::snprintf(range, sizeof range, "%g to %g", kMinProfileIntervalS, kMaxProfileIntervalS);
  return "'" + text + "' is not a profile interval: give 0 (off) or seconds from " + range;
}

}  // namespace

double parse_profile_interval(const std::string& text, const std::string& source) {
  double seconds = 0;
  if (std::string why = interval_problem(text, seconds); !why.empty())
    throw Error(Errc::kUsage, source + " " + why);
  return seconds;
}

double profile_interval_from_env() {
  const char* value = std::getenv(kProfileIntervalEnv);
  if (value == nullptr || *value == '\0') return 0;
  return parse_profile_interval(value, kProfileIntervalEnv);
}

CLI::Validator profile_interval_check() {
  return CLI::Validator(
      [](std::string& text) {
        double ignored = 0;
        return interval_problem(text, ignored);  // CLI11 puts the flag's name first
      },
      "SECONDS");
}

}  // namespace hsring
