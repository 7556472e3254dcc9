// What a claimed convolution's attributes may be (ops/conv2d.h, ops/conv_transpose.h): the
// checks both specs share, with bounds that keep every shape expression on them inside int64.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/status.h"
#include "core/strings.h"

namespace npuflow {

// Bounds on a claimed convolution's attributes, far past any real model's: within them every
// shape expression on a spec (extents, tap counts, the weight's size) stays inside int64.
inline constexpr int64_t kMaxConvolutionWindow = int64_t{1} << 16;  // kernel, stride, dilation, pad
inline constexpr int64_t kMaxConvolutionChannels = int64_t{1} << 24;
inline constexpr int64_t kMaxConvolutionWeights = int64_t{1} << 40;

// invalid_argument for a window no convolution of `op` can have (non-positive sizes, strides or
// dilations, negative pads) or one past the bounds above. Spec: ConvSpec or ConvTransposeSpec.
template <typename Spec>
Status check_convolution_window(const Spec& s, const char* op) {
  if (s.ic <= 0 || s.oc <= 0 || s.kh <= 0 || s.kw <= 0) {
    return invalid_argument(str_cat(op, " channels and kernel must be positive: ic=", s.ic,
                                    " oc=", s.oc, " kernel=", s.kh, "x", s.kw));
  }
  if (s.stride_y <= 0 || s.stride_x <= 0 || s.dil_y <= 0 || s.dil_x <= 0) {
    return invalid_argument(str_cat(op, " strides and dilations must be positive"));
  }
  if (std::min({s.pad_top, s.pad_left, s.pad_bottom, s.pad_right}) < 0) {
    return invalid_argument(str_cat(op, " pads must not be negative"));
  }
  const int64_t largest = std::max({s.kh, s.kw, s.stride_y, s.stride_x, s.dil_y, s.dil_x, s.pad_top,
                                    s.pad_left, s.pad_bottom, s.pad_right});
  if (largest > kMaxConvolutionWindow || std::max(s.ic, s.oc) > kMaxConvolutionChannels) {
    return invalid_argument(str_cat(op, " attributes past npuflow's bounds: a kernel, stride, ",
                                    "dilation or pad of ", largest, " (at most ",
                                    kMaxConvolutionWindow, "), ", std::max(s.ic, s.oc),
                                    " channels (at most ", kMaxConvolutionChannels, ")"));
  }
  int64_t weights = 0;
  if (__builtin_mul_overflow(s.ic * s.kh * s.kw, s.oc, &weights) ||
      weights > kMaxConvolutionWeights) {
    return invalid_argument(str_cat(op, " weight of ", s.oc, "x", s.ic, "x", s.kh, "x", s.kw,
                                    " is past npuflow's bound of ", kMaxConvolutionWeights,
                                    " values"));
  }
  return Status::ok();
}

}  // namespace npuflow
