#include "ops/conv2d.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "core/fp16.h"
#include "core/strings.h"
#include "ops/convolution_fp16.h"

namespace npuflow {
namespace {

// The device's direct convolution computes output channels in groups of 16 (sim/sim_conv.h).
constexpr int64_t kDeviceFilterGroup = 16;

}  // namespace

int64_t conv_extent(int64_t in, int64_t stride, int64_t kernel, int64_t dil, int64_t pad_begin,
                    int64_t pad_end) {
  const int64_t span = in + pad_begin + pad_end - dil * (kernel - 1) - 1;
  return span < 0 ? 0 : span / stride + 1;
}

Status check_conv_spec(const ConvSpec& s) {
  return check_convolution_window(s, "Conv");
}

int64_t conv_device_channels(int64_t oc) {
  return (oc + kDeviceFilterGroup - 1) / kDeviceFilterGroup * kDeviceFilterGroup;
}

Conv2d::Conv2d(std::string name, const ConvSpec& spec, std::shared_ptr<Device> device,
               Logger logger)
    : name_(std::move(name)), spec_(spec), device_(std::move(device)), logger_(std::move(logger)) {}

Result<std::unique_ptr<Conv2d>> Conv2d::create(std::string name, const ConvSpec& spec,
                                               const float* weight, const float* bias,
                                               std::shared_ptr<Device> device, Logger logger) {
  NPUFLOW_RETURN_IF_ERROR(check_conv_spec(spec));
  if (weight == nullptr || !device) return invalid_argument("Conv needs a weight and a device");
  std::unique_ptr<Conv2d> op(
      new Conv2d(std::move(name), spec, std::move(device), std::move(logger)));
  const int64_t taps = spec.ic * spec.kh * spec.kw;
  const size_t count = static_cast<size_t>(spec.oc * taps);
  op->weight_.assign(weight, weight + count);
  op->bias_.assign(static_cast<size_t>(spec.oc), 0.0f);
  if (bias) std::copy(bias, bias + spec.oc, op->bias_.begin());
  op->on_host_ = op->device_->name() == "host";
  if (op->on_host_) {
    NPUFLOW_RETURN_IF_ERROR(op->ensure_host_convolution());
    return op;
  }
  // Zero filters past OC: the device's channel group, dropped from its output.
  op->weight_fp16_.assign(static_cast<size_t>(conv_device_channels(spec.oc) * taps), 0);
  if (!floats_to_half_in_range(op->weight_.data(), count, op->weight_fp16_.data())) {
    // Such a weight would make the device compute with infinities: every call runs in fp32.
    op->weight_fp16_.clear();
    op->fallback_.mark_logged();
    op->logger_.info(str_cat(op->name_, ": a weight beyond fp16's range; it runs on the host"));
  }
  return op;
}

Status Conv2d::ensure_host_convolution() const {
  std::call_once(host_ready_, [&] {
    std::lock_guard<std::mutex> lock(host_fallback_mutex());
    auto convolution = OneDnnConvolution::create(spec_, weight_.data(), bias_.data());
    if (convolution.is_ok()) {
      host_convolution_ = std::move(convolution).value();
    } else {
      host_status_ = convolution.status();
    }
  });
  return host_status_;
}

Result<std::vector<int64_t>> Conv2d::output_shape(const std::vector<int64_t>& input_shape) const {
  return convolution_output_shape(
      name_, input_shape, spec_.ic, spec_.oc, [&](int64_t ih, int64_t iw) {
        return std::pair{
            conv_extent(ih, spec_.stride_y, spec_.kh, spec_.dil_y, spec_.pad_top, spec_.pad_bottom),
            conv_extent(iw, spec_.stride_x, spec_.kw, spec_.dil_x, spec_.pad_left,
                        spec_.pad_right)};
      });
}

Status Conv2d::run(const float* x, const std::vector<int64_t>& input_shape, float* y,
                   const ExecContext& context) const {
  auto shape = output_shape(input_shape);
  if (!shape.is_ok()) return shape.status();
  const int64_t ih = input_shape[2], iw = input_shape[3];
  const int64_t in_size = spec_.ic * ih * iw;
  const int64_t out_size = spec_.oc * shape.value()[2] * shape.value()[3];
  return run_images(
      input_shape[0], on_host_, ih, iw, name_, device_->name(), "convolution", fallback_, counters_,
      logger_,
      [&](int64_t b) { return run_device(x + b * in_size, ih, iw, y + b * out_size, context); },
      [&](int64_t b) { return run_host(x + b * in_size, ih, iw, y + b * out_size, context); });
}

Status Conv2d::run_device(const float* x, int64_t ih, int64_t iw, float* y,
                          const ExecContext& context) const {
  if (weight_fp16_.empty()) return unsupported("the weight is beyond fp16's range");
  const ConvSpec& s = spec_;
  Fp16Conv2d call;
  call.ic = s.ic;
  call.oc = conv_device_channels(s.oc);
  call.kh = s.kh;
  call.kw = s.kw;
  call.stride_y = s.stride_y;
  call.stride_x = s.stride_x;
  call.dil_y = s.dil_y;
  call.dil_x = s.dil_x;
  // The device pads symmetrically; other pads are written into the input as zeros.
  const bool symmetric = s.pad_top == s.pad_bottom && s.pad_left == s.pad_right;
  call.pad_top = symmetric ? s.pad_top : 0;
  call.pad_left = symmetric ? s.pad_left : 0;
  call.ih = symmetric ? ih : ih + s.pad_top + s.pad_bottom;
  call.iw = symmetric ? iw : iw + s.pad_left + s.pad_right;
  thread_local std::vector<uint16_t> input, output;
  bool in_range = true;
  if (symmetric) {
    input.resize(static_cast<size_t>(s.ic * ih * iw));
    in_range = floats_to_half_in_range(x, input.size(), input.data());
  } else {
    input.assign(static_cast<size_t>(s.ic * call.ih * call.iw), 0);
    for (int64_t c = 0; c < s.ic && in_range; ++c) {
      for (int64_t r = 0; r < ih && in_range; ++r) {
        uint16_t* to = input.data() + (c * call.ih + r + s.pad_top) * call.iw + s.pad_left;
        in_range = floats_to_half_in_range(x + (c * ih + r) * iw, static_cast<size_t>(iw), to);
      }
    }
  }
  if (!in_range) return input_beyond_fp16(name_, range_logged_, logger_);
  const int64_t oh = conv2d_output_height(call), ow = conv2d_output_width(call);
  output.resize(static_cast<size_t>(call.oc * oh * ow));
  call.input = input.data();
  call.weight = weight_fp16_.data();
  call.out = output.data();
  NPUFLOW_RETURN_IF_ERROR(device_->conv2d_fp16(call, context));
  // The planes past OC (the device's zero filters) are left behind.
  NPUFLOW_RETURN_IF_ERROR(
      widen_device_output(output.data(), oh, ow, 0, 0, bias_, oh, ow, x, s.ic * ih * iw, y));
  counters_.device_calls.fetch_add(1, std::memory_order_relaxed);
  return Status::ok();
}

Status Conv2d::run_host(const float* x, int64_t ih, int64_t iw, float* y,
                        const ExecContext& context) const {
  NPUFLOW_RETURN_IF_ERROR(ensure_host_convolution());
  const ConvSpec& s = spec_;
  const int64_t oh = conv_extent(ih, s.stride_y, s.kh, s.dil_y, s.pad_top, s.pad_bottom);
  const int64_t ow = conv_extent(iw, s.stride_x, s.kw, s.dil_x, s.pad_left, s.pad_right);
  return host_convolution_->run(x, ih, iw, oh, ow, y, context);
}

}  // namespace npuflow
