#include "train/param_layout.h"

#include "common/error.h"

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

}  // namespace hsring::train
