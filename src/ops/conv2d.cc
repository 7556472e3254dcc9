#include "ops/conv2d.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "core/fp16.h"
#include "core/strings.h"
#include "host/host_device.h"
#include "ops/convolution_fp16.h"
#include "ops/float_linear.h"

namespace npuflow {
namespace {

// The device's direct convolution computes output channels in groups of 16 (sim/sim_conv.h).
constexpr int64_t kDeviceFilterGroup = 16;
// Rows of the host im2col GEMM per chunk: bounds the column buffer to about 16 MiB.
constexpr int64_t kColumnFloats = int64_t{1} << 22;

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
    op->host_ = op->device_;
    NPUFLOW_RETURN_IF_ERROR(op->ensure_host_weight());
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

Status Conv2d::ensure_host_weight() const {
  std::call_once(host_packed_, [&] {
    std::lock_guard<std::mutex> lock(host_fallback_mutex());
    if (!host_) host_ = std::make_shared<HostDevice>(DeviceOptions{});
    // The GEMM weight is (IC KH KW) x OC: ONNX's [oc][ic kh kw] transposed.
    const int64_t taps = spec_.ic * spec_.kh * spec_.kw;
    std::vector<float> transposed(weight_.size());
    for (int64_t o = 0; o < spec_.oc; ++o) {
      for (int64_t t = 0; t < taps; ++t) transposed[t * spec_.oc + o] = weight_[o * taps + t];
    }
    auto packed = host_->pack_float_weight(transposed.data(), taps, spec_.oc);
    if (packed.is_ok()) {
      host_weight_ = std::move(packed).value();
    } else {
      host_pack_status_ = packed.status();
    }
  });
  return host_pack_status_;
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
  NPUFLOW_RETURN_IF_ERROR(ensure_host_weight());
  const ConvSpec& s = spec_;
  const int64_t oh = conv_extent(ih, s.stride_y, s.kh, s.dil_y, s.pad_top, s.pad_bottom);
  const int64_t ow = conv_extent(iw, s.stride_x, s.kw, s.dil_x, s.pad_left, s.pad_right);
  const int64_t pixels = oh * ow, taps = s.ic * s.kh * s.kw;
  const int64_t chunk = std::clamp<int64_t>(kColumnFloats / taps, 1, pixels);
  // Scratch kept per thread across calls, as ConvTranspose2d's: fresh pages each call cost more
  // page faults than the copy itself.
  thread_local std::vector<float> columns_scratch, products_scratch;
  columns_scratch.resize(std::max(columns_scratch.size(), static_cast<size_t>(chunk * taps)));
  products_scratch.resize(std::max(products_scratch.size(), static_cast<size_t>(chunk * s.oc)));
  float* const columns = columns_scratch.data();
  float* const products = products_scratch.data();
  for (int64_t p0 = 0; p0 < pixels; p0 += chunk) {
    const int64_t rows = std::min(chunk, pixels - p0);
    // im2col: row p holds the input under the kernel at output pixel p0 + p, zeros off the edge.
    context.run(static_cast<size_t>(rows), [&](size_t task) {
      const int64_t p = p0 + static_cast<int64_t>(task);
      const int64_t oy = p / ow, ox = p % ow;
      float* row = columns + static_cast<int64_t>(task) * taps;
      for (int64_t c = 0; c < s.ic; ++c) {
        for (int64_t i = 0; i < s.kh; ++i) {
          const int64_t iy = oy * s.stride_y - s.pad_top + i * s.dil_y;
          float* to = row + (c * s.kh + i) * s.kw;
          if (iy < 0 || iy >= ih) {
            std::fill(to, to + s.kw, 0.0f);
            continue;
          }
          const float* from = x + (c * ih + iy) * iw;
          for (int64_t j = 0; j < s.kw; ++j) {
            const int64_t ix = ox * s.stride_x - s.pad_left + j * s.dil_x;
            to[j] = ix >= 0 && ix < iw ? from[ix] : 0.0f;
          }
        }
      }
    });
    NPUFLOW_RETURN_IF_ERROR(run_linear(*host_, columns, rows, *host_weight_, products, context));
    // [pixel][oc] -> [oc][pixel], with the bias.
    context.run(static_cast<size_t>(s.oc), [&](size_t task) {
      const auto o = static_cast<int64_t>(task);
      float* out = y + o * pixels + p0;
      const float bias = bias_[task];
      for (int64_t p = 0; p < rows; ++p) out[p] = products[p * s.oc + o] + bias;
    });
  }
  return Status::ok();
}

}  // namespace npuflow
