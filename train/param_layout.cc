#include "train/param_layout.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "common/random.h"

namespace hsring::train {

const ParamInfo* ParamLayout::find(std::string_view name) const {
  for (const ParamInfo& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const ParamInfo& ParamLayout::at(std::string_view name) const {
  if (const ParamInfo* t = find(name)) return *t;
  throw Error(Errc::kModel, "the drafter has no parameter '" + std::string(name) + "'");
}

void ParamLayout::add(std::string name, std::vector<int64_t> shape) {
  ParamInfo t;
  t.name = std::move(name);
  t.size = 1;
  for (int64_t d : shape) t.size *= size_t(d);
  t.weight_decay = shape.size() > 1;
  t.shape = std::move(shape);
  t.offset = (total + kParamAlignment - 1) / kParamAlignment * kParamAlignment;
  total = t.offset + t.size;
  tensors.push_back(std::move(t));
}

template <class Real>
void init_param_tensor(const ParamInfo& t, uint64_t seed, Real* data) {
  if (t.shape.size() == 1) {
    std::fill(data, data + t.size, Real(1));
    return;
  }
  uint64_t state = name_key(seed, t.name);
  const float bound = 1.0f / std::sqrt(float(t.shape[1]));
  for (size_t i = 0; i < t.size; ++i) data[i] = Real(bound * signed_unit(splitmix64(state)));
}

template void init_param_tensor(const ParamInfo&, uint64_t, float*);
template void init_param_tensor(const ParamInfo&, uint64_t, double*);

}  // namespace hsring::train
