// Finite-difference gradient checking in double precision, and small deterministic random
// inputs, for the drafter's tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace hsring::train::testing {

// n values uniform in [lo, hi), a pure function of seed.
std::vector<double> random_values(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0);
std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f);

// `count` distinct indices of [0, n) (all of them when count >= n), sorted.
std::vector<size_t> sample_indices(size_t n, size_t count, uint64_t seed);

struct GradCheck {
  double max_error = 0;  // the largest relative error seen
  size_t worst = 0;      // the index where it was seen
  double analytic = 0;   // the two gradients there
  double numeric = 0;
  size_t checked = 0;

  std::string describe(const std::string& what) const;
};

// Compares grad[i] with the central difference (f(x + h) - f(x - h)) / 2h of `loss` in
// values[i], for every i of `indices` (values is restored). The relative error is
// |analytic - numeric| / max(|analytic|, |numeric|, floor): `floor` keeps gradients that
// are zero up to rounding from dividing by nothing.
GradCheck check_gradient(std::span<double> values, std::span<const double> grad,
                         const std::function<double()>& loss, std::span<const size_t> indices,
                         double step = 1e-5, double floor = 1e-3);

// sum_i weights[i] * values[i], in double: the scalar "loss" that projects an op's output.
double project(std::span<const double> values, std::span<const double> weights);

}  // namespace hsring::train::testing
