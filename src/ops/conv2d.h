// One ONNX Conv (2-D, group 1, float, constant weight) as a claimed node runs it (issue #14: SAM's
// neck, RF-DETR's projector, any graph's convolutions where the device has conv).
// - Host device: oneDNN's fp32 convolution (host/onednn_convolution.h), the weight reordered once
//   per input size, the output channels in slices over the pool; the bias added in fp32.
// - An NPU: the device's fp16 convolution (Device::conv2d_fp16) against a weight rounded once,
//   its output channels padded with zero filters to the device's group of 16 and dropped after;
//   asymmetric pads are written into the fp16 input as zeros (the device pads symmetrically).
// Wherever the device refuses or fails a call, or fp16 cannot hold the values (an input beyond its
// range, an output that overflows it), the image reruns in fp32 on the host.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/log.h"
#include "core/status.h"
#include "device/device.h"
#include "host/onednn_convolution.h"
#include "ops/convolution_images.h"
#include "ops/convolution_window.h"
#include "ops/device_fallback.h"

namespace npuflow {

// The node's attributes, in ONNX's terms (pads begin and end per axis).
using ConvSpec = ConvolutionGeometry;

// ONNX's output extent along one axis: (in + pads - dil (k - 1) - 1) / stride + 1, floored; <= 0
// when the padded input is shorter than the dilated kernel.
int64_t conv_extent(int64_t in, int64_t stride, int64_t kernel, int64_t dil, int64_t pad_begin,
                    int64_t pad_end);

// invalid_argument for attributes no Conv can have (non-positive sizes, strides or dilations,
// negative pads) or past npuflow's bounds (ops/convolution_window.h).
Status check_conv_spec(const ConvSpec& spec);

// The output channel count the device computes: OC rounded up to its filter group of 16.
int64_t conv_device_channels(int64_t oc);

class Conv2d {
 public:
  // weight: [oc][ic][kh][kw]; bias: [oc] or null.
  static Result<std::unique_ptr<Conv2d>> create(std::string name, const ConvSpec& spec,
                                                const float* weight, const float* bias,
                                                std::shared_ptr<Device> device, Logger logger);

  const ConvSpec& spec() const { return spec_; }
  // [batch, oc, oh, ow] for an input [batch, ic, ih, iw]; an error for any other shape or an
  // empty output.
  Result<std::vector<int64_t>> output_shape(const std::vector<int64_t>& input_shape) const;
  // x: [batch][ic][ih][iw] -> y: output_shape(...).
  Status run(const float* x, const std::vector<int64_t>& input_shape, float* y,
             const ExecContext& context) const;

  const ConvolutionCounters& counters() const { return counters_; }
  const Device& device() const { return *device_; }

 private:
  Conv2d(std::string name, const ConvSpec& spec, std::shared_ptr<Device> device, Logger logger);
  // One image on the device in fp16; kUnsupported when fp16 cannot hold it.
  Status run_device(const float* x, int64_t ih, int64_t iw, float* y,
                    const ExecContext& context) const;
  // One image in fp32 on the host.
  Status run_host(const float* x, int64_t ih, int64_t iw, float* y,
                  const ExecContext& context) const;
  Status ensure_host_convolution() const;

  std::string name_;
  ConvSpec spec_;
  std::shared_ptr<Device> device_;
  Logger logger_;
  bool on_host_ = false;       // the device is the host: the fp32 path only
  std::vector<float> weight_;  // [oc][ic kh kw], kept for the host path
  std::vector<float> bias_;    // [oc], zeros when the node has none
  std::vector<uint16_t>
      weight_fp16_;  // [oc padded][ic][kh][kw], the device's operand (empty: none)
  mutable std::once_flag host_ready_;  // the fp32 convolution is built on first host use
  mutable std::unique_ptr<OneDnnConvolution> host_convolution_;
  mutable Status host_status_;
  mutable ConvolutionCounters counters_;
  DeviceFallback fallback_;
  mutable std::atomic<bool> range_logged_{false};
};

}  // namespace npuflow
