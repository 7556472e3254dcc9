// Stand-in for stable-diffusion.cpp's tensor.hpp: spectrum.hpp reads a latent through
// sd::Tensor<float>'s data() and numel() only.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace sd {

template <typename T>
class Tensor {
 public:
  explicit Tensor(std::vector<T> values) : values_(std::move(values)) {}
  T* data() { return values_.data(); }
  const T* data() const { return values_.data(); }
  int64_t numel() const { return static_cast<int64_t>(values_.size()); }

 private:
  std::vector<T> values_;
};

}  // namespace sd
