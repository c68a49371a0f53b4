#include "ops/bias.h"

#include <vector>

#include "ops/dot.h"

namespace hsring::ops {

template <class Real>
void bias_forward(Real* x, size_t rows, size_t dim, const Real* bias) {
  for (size_t r = 0; r < rows; ++r)
    for (size_t i = 0; i < dim; ++i) x[r * dim + i] += bias[i];
}

template <class Real>
void bias_backward(const Real* dy, size_t rows, size_t dim, Real* dbias) {
  std::vector<double> acc(dim, 0.0);
  for (size_t r = 0; r < rows; ++r) axpy_double(1.0, dy + r * dim, acc.data(), dim);
  for (size_t i = 0; i < dim; ++i) dbias[i] = Real(double(dbias[i]) + acc[i]);
}

template void bias_forward(float*, size_t, size_t, const float*);
template void bias_forward(double*, size_t, size_t, const double*);
template void bias_backward(const float*, size_t, size_t, float*);
template void bias_backward(const double*, size_t, size_t, double*);

}  // namespace hsring::ops
