// What the benchmarks share to report a figure: the median of repeated timings and the
// `key=value` lines they print.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <vector>

namespace hsring::bench {

// The middle value; the mean of the two middle ones for an even count. REQUIRES: not empty.
inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// One `key=value` line, the value in a printf format.
inline void print(const char* key, double value, const char* format = "%.4g") {
  std::printf("%s=", key);
  std::printf(format, value);
  std::printf("\n");
}

}  // namespace hsring::bench
