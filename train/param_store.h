// The trained parameters of a CPU model: one flat buffer in a ParamLayout's order, the
// gradients in a second buffer of the same layout, and the thread count the model's kernels
// use. The drafter, DFlash and causal-LM models keep these the same way, so they share them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "common/parallel.h"
#include "train/param_layout.h"

namespace hsring::train {

template <class Real>
class ParamStore {
 public:
  const ParamLayout& layout() const { return layout_; }

  // The flat buffers, layout().total elements each.
  std::span<Real> params() { return params_; }
  std::span<const Real> params() const { return params_; }
  std::span<Real> grads() { return grads_; }
  std::span<const Real> grads() const { return grads_; }
  // One tensor's slice of params() / grads(). Throws Error(kModel).
  std::span<Real> param(std::string_view name) { return slice(params_, name); }
  std::span<Real> grad(std::string_view name) { return slice(grads_, name); }

  void zero_grads() { std::fill(grads_.begin(), grads_.end(), Real(0)); }
  uint32_t threads() const { return threads_; }
  // 0: every hardware thread.
  void set_threads(uint32_t threads) { threads_ = resolve_threads(threads); }

 protected:
  explicit ParamStore(uint32_t threads) : threads_(resolve_threads(threads)) {}

  // Takes `layout` and sizes both buffers to it, every element zero.
  void allocate(ParamLayout layout) {
    layout_ = std::move(layout);
    params_.assign(layout_.total, Real(0));
    grads_.assign(layout_.total, Real(0));
  }

  ParamLayout layout_;
  uint32_t threads_;
  std::vector<Real> params_, grads_;

 private:
  std::span<Real> slice(std::vector<Real>& buffer, std::string_view name) {
    const ParamInfo& t = layout_.at(name);
    return std::span<Real>(buffer).subspan(t.offset, t.size);
  }
};

}  // namespace hsring::train
