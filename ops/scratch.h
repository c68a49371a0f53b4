// Scratch buffers that grow to the largest size asked of them and never shrink: a model's
// activations and gradients reuse them across batches of different sizes without
// reallocating each step.
#pragma once

#include <cstddef>
#include <vector>

namespace hsring::ops {

template <class T>
void grow_to(std::vector<T>& buffer, size_t size) {
  if (buffer.size() < size) buffer.resize(size);
}

}  // namespace hsring::ops
