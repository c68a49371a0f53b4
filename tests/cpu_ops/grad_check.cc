#include "grad_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "common/random.h"

namespace hsring::train::testing {

std::vector<double> random_values(size_t n, uint64_t seed, double lo, double hi) {
  std::vector<double> out(n);
  uint64_t state = mix64(seed);
  for (double& v : out) v = lo + (hi - lo) * double(splitmix64(state) >> 11) * 0x1.0p-53;
  return out;
}

std::vector<float> random_floats(size_t n, uint64_t seed, float lo, float hi) {
  const std::vector<double> d = random_values(n, seed, lo, hi);
  return std::vector<float>(d.begin(), d.end());
}

std::vector<size_t> sample_indices(size_t n, size_t count, uint64_t seed) {
  std::vector<size_t> all(n);
  std::iota(all.begin(), all.end(), size_t(0));
  if (count >= n) return all;
  uint64_t state = mix64(seed);
  // Partial Fisher-Yates: the first `count` entries are a uniform sample.
  for (size_t i = 0; i < count; ++i) std::swap(all[i], all[i + splitmix64(state) % (n - i)]);
  all.resize(count);
  std::sort(all.begin(), all.end());
  return all;
}

std::string GradCheck::describe(const std::string& what) const {
  char text[256];
  std::snprintf(text, sizeof(text),
                ": worst relative error %.3g at index %zu (analytic %.9g, numeric %.9g), %zu "
                "checked",
                max_error, worst, analytic, numeric, checked);
  return what + text;
}

GradCheck check_gradient(std::span<double> values, std::span<const double> grad,
                         const std::function<double()>& loss, std::span<const size_t> indices,
                         double step, double floor) {
  GradCheck result;
  for (size_t i : indices) {
    const double saved = values[i];
    values[i] = saved + step;
    const double up = loss();
    values[i] = saved - step;
    const double down = loss();
    values[i] = saved;
    const double numeric = (up - down) / (2 * step);
    const double scale = std::max({std::abs(grad[i]), std::abs(numeric), floor});
    const double error = std::abs(grad[i] - numeric) / scale;
    if (error >= result.max_error) {
      result.max_error = error;
      result.worst = i;
      result.analytic = grad[i];
      result.numeric = numeric;
    }
    ++result.checked;
  }
  return result;
}

double project(std::span<const double> values, std::span<const double> weights) {
  double sum = 0;
  for (size_t i = 0; i < values.size(); ++i) sum += values[i] * weights[i];
  return sum;
}

}  // namespace hsring::train::testing
