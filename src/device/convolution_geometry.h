// A 2-D, group-1 convolution's attributes in ONNX's terms: what the claimed Conv and ConvTranspose
// kernels (ops/) and the host's oneDNN convolution (host/) describe a node by.
#pragma once

#include <cstdint>

namespace npuflow {

// Pads begin and end per axis; ic and oc are the input's and the output's channels.
struct ConvolutionGeometry {
  int64_t ic = 0, oc = 0, kh = 0, kw = 0;
  int64_t stride_y = 1, stride_x = 1, dil_y = 1, dil_x = 1;
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
};

}  // namespace npuflow
