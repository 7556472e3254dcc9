// One ONNX ConvTranspose (2-D, group 1, float, constant weight) as a claimed node runs it (issue
// #14 item 3). Its arithmetic is one GEMM, the input's pixels by IC against the weight as
// IC x (OC KH KW), and a scatter-add of each pixel's OC KH KW columns into the output (the way
// ONNX Runtime's CPU kernel computes it); the bias is added in fp32.
// - Host device: that GEMM in fp32.
// - An NPU, stride > 1: the GEMM on the device in fp16 against a weight packed once per session
//   (any input size reuses it), the scatter on the host. The library's own transposed convolution
//   would run over the zero-dilated input, stride_y x stride_x times the GEMM's MACs.
// - An NPU, stride 1: the device's fp16 transposed convolution (Device::conv_transpose2d_fp16),
//   whose MACs equal the GEMM's and which leaves no scatter to the host; asymmetric pads run as
//   the smaller pad on both sides and a crop.
// Wherever the device refuses or fails a call, or fp16 cannot hold the values (an input beyond
// its range, an output that overflows it), the image reruns in fp32 on the host.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/log.h"
#include "core/status.h"
#include "device/convolution_geometry.h"
#include "device/device.h"
#include "ops/convolution_images.h"
#include "ops/convolution_window.h"
#include "ops/device_fallback.h"

namespace npuflow {

// The node's attributes, in ONNX's terms: a convolution's, and output_padding.
struct ConvTransposeSpec : ConvolutionGeometry {
  int64_t opad_y = 0, opad_x = 0;
};

// ONNX's output extent along one axis: stride (in - 1) + opad + dil (k - 1) + 1 - pads.
int64_t conv_transpose_extent(int64_t in, int64_t stride, int64_t kernel, int64_t dil,
                              int64_t pad_begin, int64_t pad_end, int64_t opad);

// invalid_argument for attributes no ConvTranspose can have (non-positive sizes, strides or
// dilations, negative pads, output padding not below the stride) or past npuflow's bounds
// (ops/convolution_window.h).
Status check_conv_transpose_spec(const ConvTransposeSpec& spec);

// Why the device's contract refuses these attributes whatever the input size ("" when it may
// take them): its transposed convolution cannot crop more than dil (k - 1) per side.
std::string conv_transpose_contract_refusal(const ConvTransposeSpec& spec);

// Whether an NPU runs the node as the GEMM and a host scatter (else as its transposed
// convolution): when a stride is above 1.
bool conv_transpose_runs_as_gemm(const ConvTransposeSpec& spec);

class ConvTranspose2d {
 public:
  // weight: [ic][oc][kh][kw]; bias: [oc] or null. host: the session's host reference, which runs
  // the calls the device refuses or fails in fp32 (route/device_selection.h); null builds one with
  // default options on first use.
  static Result<std::unique_ptr<ConvTranspose2d>> create(
      std::string name, const ConvTransposeSpec& spec, const float* weight, const float* bias,
      std::shared_ptr<Device> device, Logger logger, std::shared_ptr<Device> host = nullptr);

  const ConvTransposeSpec& spec() const { return spec_; }
  // [batch, oc, oh, ow] for an input [batch, ic, ih, iw]; an error for any other shape or an
  // empty output.
  Result<std::vector<int64_t>> output_shape(const std::vector<int64_t>& input_shape) const;
  // x: [batch][ic][ih][iw] -> y: output_shape(...).
  Status run(const float* x, const std::vector<int64_t>& input_shape, float* y,
             const ExecContext& context) const;

  const ConvolutionCounters& counters() const { return counters_; }
  const Device& device() const { return *device_; }

 private:
  ConvTranspose2d(std::string name, const ConvTransposeSpec& spec, std::shared_ptr<Device> device,
                  Logger logger);
  // One image on the device in fp16; kUnsupported when fp16 cannot hold it.
  Status run_device(const float* x, int64_t ih, int64_t iw, float* y,
                    const ExecContext& context) const;
  Status run_device_convolution(const float* x, int64_t ih, int64_t iw, float* y,
                                const ExecContext& context) const;
  // One image in fp32 on the host.
  Status run_host(const float* x, int64_t ih, int64_t iw, float* y,
                  const ExecContext& context) const;
  // The GEMM on `device` against `weight` (run_linear: kUnsupported when an fp16 column became
  // infinite from finite operands), then the scatter.
  Status gemm_scatter(Device& device, const PackedWeight& weight, const float* x, int64_t ih,
                      int64_t iw, float* y, const ExecContext& context) const;
  Status ensure_host_weight() const;

  std::string name_;
  ConvTransposeSpec spec_;
  std::shared_ptr<Device> device_;
  Logger logger_;
  bool on_host_ = false;                         // the device is the host: the fp32 path only
  std::vector<float> weight_;                    // [ic][oc kh kw], kept for the host path
  std::vector<float> bias_;                      // [oc], zeros when the node has none
  std::vector<uint16_t> weight_fp16_;            // the device convolution's operand, rounded once
  std::unique_ptr<PackedWeight> device_weight_;  // the device GEMM's, packed once (null: none)
  bool as_gemm_ = false;
  mutable std::once_flag host_packed_;    // the fp32 weight is packed on first host use
  mutable std::shared_ptr<Device> host_;  // the device that runs the fp32 path
  mutable std::unique_ptr<PackedWeight> host_weight_;
  mutable Status host_pack_status_;
  mutable ConvolutionCounters counters_;
  DeviceFallback fallback_;
  mutable std::atomic<bool> range_logged_{false};
};

}  // namespace npuflow
