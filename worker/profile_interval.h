// The period of the workers' stage-timing log: `--profile-interval S` on the workers and
// on `hsring run`, or HSRING_PROFILE_INTERVAL when the flag is absent. One parser for
// both, so a bad value gets the same clear error wherever it is given.
#pragma once

#include <string>

// CLI11 is declared, not included: its header costs seconds of compile time in every
// file that includes it, and only the files that build a command line use it.
namespace CLI {
class Validator;
}  // namespace CLI

namespace hsring {

inline constexpr const char* kProfileIntervalEnv = "HSRING_PROFILE_INTERVAL";
// Shorter periods would make the log the workload; longer ones are not a profile.
inline constexpr double kMinProfileIntervalS = 0.1;
inline constexpr double kMaxProfileIntervalS = 86400;

// Seconds from `text`: 0 (off) or a number in [kMinProfileIntervalS, kMaxProfileIntervalS].
// Throws Error(kUsage) naming `source` (the flag or the variable) otherwise.
double parse_profile_interval(const std::string& text, const std::string& source);

// HSRING_PROFILE_INTERVAL's seconds; 0 when it is unset or empty. Throws like
// parse_profile_interval.
double profile_interval_from_env();

// The CLI11 check of `--profile-interval` (declared with every run flag in
// worker/run_flag_table.cc): parse_profile_interval's reason, after the flag's name.
CLI::Validator profile_interval_check();

}  // namespace hsring
