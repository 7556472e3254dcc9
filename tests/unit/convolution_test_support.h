// What the Conv and ConvTranspose kernel tests share: a seeded random case (a spec, an input size
// and values), running a kernel on it, and the relative error against ONNX's definition.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "device/device.h"
#include "graph/graph_view.h"

namespace npuflow::convolution_test {

template <typename Spec>
struct Case {
  Spec spec;
  int64_t batch = 1, ih = 1, iw = 1;
  std::vector<float> x, w, b;
};

inline int64_t pick(std::mt19937& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// The sizes, strides and dilations every random case draws; pads are each kernel's own.
template <typename Spec>
void pick_sizes(Spec& s, std::mt19937& rng) {
  s.ic = pick(rng, 1, 24);
  s.oc = pick(rng, 1, 40);
  s.kh = pick(rng, 1, 5);
  s.kw = pick(rng, 1, 5);
  s.stride_y = pick(rng, 1, 3);
  s.stride_x = pick(rng, 1, 3);
  s.dil_y = pick(rng, 1, 2);
  s.dil_x = pick(rng, 1, 2);
}

// Normal inputs and biases, weights at 0.3 of that scale.
template <typename Spec>
void fill_values(Case<Spec>& c, std::mt19937& rng) {
  const Spec& s = c.spec;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < c.batch * s.ic * c.ih * c.iw; ++i) c.x.push_back(normal(rng));
  for (int64_t i = 0; i < s.ic * s.oc * s.kh * s.kw; ++i) c.w.push_back(0.3f * normal(rng));
  for (int64_t i = 0; i < s.oc; ++i) c.b.push_back(normal(rng));
}

inline double rel_l2(const std::vector<double>& ref, const std::vector<float>& got) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    diff += (ref[i] - got[i]) * (ref[i] - got[i]);
    norm += ref[i] * ref[i];
  }
  return std::sqrt(diff / norm);
}

// The kernel's output for the case's whole batch (NaN where it wrote nothing).
template <typename Op, typename Spec>
std::vector<float> run(const Op& op, const Case<Spec>& c) {
  const std::vector<int64_t> in_shape = {c.batch, c.spec.ic, c.ih, c.iw};
  auto shape = op.output_shape(in_shape);
  EXPECT_TRUE(shape.is_ok()) << shape.status().message();
  std::vector<float> y(static_cast<size_t>(element_count(shape.value())), NAN);
  const Status status = op.run(c.x.data(), in_shape, y.data(), ExecContext{});
  EXPECT_TRUE(status.is_ok()) << status.message();
  return y;
}

// host: the session's host reference, where the kernel takes one (ConvTranspose2d).
template <typename Op, typename Spec, typename... Host>
std::unique_ptr<Op> make(const Case<Spec>& c, std::shared_ptr<Device> device, Host... host) {
  auto op = Op::create("op", c.spec, c.w.data(), c.b.data(), std::move(device), Logger{},
                       std::move(host)...);
  EXPECT_TRUE(op.is_ok()) << op.status().message();
  return std::move(op).value();
}

}  // namespace npuflow::convolution_test
