#include "ops/conv_transpose.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "core/fp16.h"
#include "core/strings.h"
#include "host/host_device.h"
#include "ops/convolution_fp16.h"
#include "ops/float_linear.h"

namespace npuflow {

int64_t conv_transpose_extent(int64_t in, int64_t stride, int64_t kernel, int64_t dil,
                              int64_t pad_begin, int64_t pad_end, int64_t opad) {
  return stride * (in - 1) + opad + dil * (kernel - 1) + 1 - pad_begin - pad_end;
}

Status check_conv_transpose_spec(const ConvTransposeSpec& s) {
  NPUFLOW_RETURN_IF_ERROR(check_convolution_window(s, "ConvTranspose"));
  if (std::min(s.opad_y, s.opad_x) < 0) {
    return invalid_argument("ConvTranspose output_padding must not be negative");
  }
  // ONNX Runtime's CPU kernel fails a node whose output padding is not below the stride: claimed,
  // it would give an answer where the runtime gives an error.
  if (s.opad_y >= s.stride_y || s.opad_x >= s.stride_x) {
    return invalid_argument(str_cat("ConvTranspose output_padding ", s.opad_y, ",", s.opad_x,
                                    " is not below the stride"));
  }
  return Status::ok();
}

std::string conv_transpose_contract_refusal(const ConvTransposeSpec& s) {
  // The device crops min(pad) on both sides; its lowering pads the dilated input by
  // dil (k - 1) - pad, which must not be negative.
  const int64_t pad_y = std::min(s.pad_top, s.pad_bottom);
  const int64_t pad_x = std::min(s.pad_left, s.pad_right);
  if (pad_y > s.dil_y * (s.kh - 1) || pad_x > s.dil_x * (s.kw - 1)) {
    return str_cat("pads ", pad_y, ",", pad_x, " exceed the dilated kernel's reach ",
                   s.dil_y * (s.kh - 1), ",", s.dil_x * (s.kw - 1),
                   ": the device cannot crop that much");
  }
  return "";
}

bool conv_transpose_runs_as_gemm(const ConvTransposeSpec& s) {
  return s.stride_y > 1 || s.stride_x > 1;
}

ConvTranspose2d::ConvTranspose2d(std::string name, const ConvTransposeSpec& spec,
                                 std::shared_ptr<Device> device, Logger logger)
    : name_(std::move(name)), spec_(spec), device_(std::move(device)), logger_(std::move(logger)) {}

Result<std::unique_ptr<ConvTranspose2d>> ConvTranspose2d::create(
    std::string name, const ConvTransposeSpec& spec, const float* weight, const float* bias,
    std::shared_ptr<Device> device, Logger logger, std::shared_ptr<Device> host) {
  NPUFLOW_RETURN_IF_ERROR(check_conv_transpose_spec(spec));
  if (weight == nullptr || !device)
    return invalid_argument("ConvTranspose needs a weight and a device");
  std::unique_ptr<ConvTranspose2d> op(
      new ConvTranspose2d(std::move(name), spec, std::move(device), std::move(logger)));
  const size_t count = static_cast<size_t>(spec.ic * spec.oc * spec.kh * spec.kw);
  op->weight_.assign(weight, weight + count);
  op->bias_.assign(static_cast<size_t>(spec.oc), 0.0f);
  if (bias) std::copy(bias, bias + spec.oc, op->bias_.begin());
  op->on_host_ = op->device_->name() == "host";
  op->host_ = op->on_host_ ? op->device_ : std::move(host);  // null: built on first host use
  if (op->on_host_) {
    NPUFLOW_RETURN_IF_ERROR(op->ensure_host_weight());
    return op;
  }
  op->weight_fp16_.resize(count);
  if (!floats_to_half_in_range(op->weight_.data(), count, op->weight_fp16_.data())) {
    // Such a weight would make the device compute with infinities: every call runs in fp32.
    op->weight_fp16_.clear();
    op->fallback_.mark_logged();
    op->logger_.info(str_cat(op->name_, ": a weight beyond fp16's range; it runs on the host"));
    return op;
  }
  op->as_gemm_ = conv_transpose_runs_as_gemm(spec);
  if (op->as_gemm_) {
    auto packed = op->device_->pack_fp16_weight(op->weight_fp16_.data(), spec.ic,
                                                spec.oc * spec.kh * spec.kw);
    if (packed.is_ok()) {
      op->device_weight_ = std::move(packed).value();
    } else {
      op->fallback_.mark_logged();
      op->logger_.warning(str_cat(op->name_, ": ", op->device_->name(),
                                  " did not take the weight (", packed.status().message(),
                                  "); it runs on the host in fp32"));
    }
    op->weight_fp16_.clear();  // the device holds its own copy
    op->weight_fp16_.shrink_to_fit();
  }
  return op;
}

Status ConvTranspose2d::ensure_host_weight() const {
  std::call_once(host_packed_, [&] {
    std::lock_guard<std::mutex> lock(host_fallback_mutex());
    if (!host_) host_ = std::make_shared<HostDevice>(DeviceOptions{});
    // ONNX's [ic][oc][kh][kw] is the row-major IC x (OC KH KW) GEMM weight as it is.
    auto packed =
        host_->pack_float_weight(weight_.data(), spec_.ic, spec_.oc * spec_.kh * spec_.kw);
    if (packed.is_ok()) {
      host_weight_ = std::move(packed).value();
    } else {
      host_pack_status_ = packed.status();
    }
  });
  return host_pack_status_;
}

Result<std::vector<int64_t>> ConvTranspose2d::output_shape(
    const std::vector<int64_t>& input_shape) const {
  const ConvTransposeSpec& s = spec_;
  return convolution_output_shape(name_, input_shape, s.ic, s.oc, [&](int64_t ih, int64_t iw) {
    return std::pair{
        conv_transpose_extent(ih, s.stride_y, s.kh, s.dil_y, s.pad_top, s.pad_bottom, s.opad_y),
        conv_transpose_extent(iw, s.stride_x, s.kw, s.dil_x, s.pad_left, s.pad_right, s.opad_x)};
  });
}

Status ConvTranspose2d::run(const float* x, const std::vector<int64_t>& input_shape, float* y,
                            const ExecContext& context) const {
  auto shape = output_shape(input_shape);
  if (!shape.is_ok()) return shape.status();
  const int64_t ih = input_shape[2], iw = input_shape[3];
  const int64_t in_size = spec_.ic * ih * iw;
  const int64_t out_size = spec_.oc * shape.value()[2] * shape.value()[3];
  return run_images(
      input_shape[0], on_host_, ih, iw, name_, device_->name(), "transposed convolution", fallback_,
      counters_, logger_,
      [&](int64_t b) { return run_device(x + b * in_size, ih, iw, y + b * out_size, context); },
      [&](int64_t b) { return run_host(x + b * in_size, ih, iw, y + b * out_size, context); });
}

Status ConvTranspose2d::run_device(const float* x, int64_t ih, int64_t iw, float* y,
                                   const ExecContext& context) const {
  if (!as_gemm_) return run_device_convolution(x, ih, iw, y, context);
  if (!device_weight_) return unsupported("the device holds no weight");
  const int64_t count = spec_.ic * ih * iw;
  if (std::any_of(x, x + count,
                  [](float v) { return std::isfinite(v) && std::abs(v) > 65504.0f; })) {
    return input_beyond_fp16(name_, range_logged_, logger_);
  }
  NPUFLOW_RETURN_IF_ERROR(gemm_scatter(*device_, *device_weight_, x, ih, iw, y, context));
  counters_.device_calls.fetch_add(1, std::memory_order_relaxed);
  return Status::ok();
}

Status ConvTranspose2d::run_device_convolution(const float* x, int64_t ih, int64_t iw, float* y,
                                               const ExecContext& context) const {
  if (weight_fp16_.empty()) return unsupported("the weight is beyond fp16's range");
  const ConvTransposeSpec& s = spec_;
  Fp16ConvTranspose2d call;
  call.ic = s.ic;
  call.ih = ih;
  call.iw = iw;
  call.oc = s.oc;
  call.kh = s.kh;
  call.kw = s.kw;
  call.stride_y = s.stride_y;
  call.stride_x = s.stride_x;
  call.dil_y = s.dil_y;
  call.dil_x = s.dil_x;
  // The device pads symmetrically: the smaller pad on both sides, the rest cropped below.
  call.pad_top = std::min(s.pad_top, s.pad_bottom);
  call.pad_left = std::min(s.pad_left, s.pad_right);
  call.opad_y = s.opad_y;
  call.opad_x = s.opad_x;
  const int64_t full_h = conv_transpose2d_output_height(call);
  const int64_t full_w = conv_transpose2d_output_width(call);
  thread_local std::vector<uint16_t> input, output;
  input.resize(static_cast<size_t>(s.ic * ih * iw));
  if (!floats_to_half_in_range(x, input.size(), input.data())) {
    return input_beyond_fp16(name_, range_logged_, logger_);
  }
  output.resize(static_cast<size_t>(s.oc * full_h * full_w));
  call.input = input.data();
  call.weight = weight_fp16_.data();
  call.out = output.data();
  NPUFLOW_RETURN_IF_ERROR(device_->conv_transpose2d_fp16(call, context));
  const int64_t oh =
      conv_transpose_extent(ih, s.stride_y, s.kh, s.dil_y, s.pad_top, s.pad_bottom, s.opad_y);
  const int64_t ow =
      conv_transpose_extent(iw, s.stride_x, s.kw, s.dil_x, s.pad_left, s.pad_right, s.opad_x);
  const int64_t row0 = s.pad_top - call.pad_top, col0 = s.pad_left - call.pad_left;
  NPUFLOW_RETURN_IF_ERROR(widen_device_output(output.data(), full_h, full_w, row0, col0, bias_, oh,
                                              ow, x, s.ic * ih * iw, y));
  counters_.device_calls.fetch_add(1, std::memory_order_relaxed);
  return Status::ok();
}

Status ConvTranspose2d::run_host(const float* x, int64_t ih, int64_t iw, float* y,
                                 const ExecContext& context) const {
  NPUFLOW_RETURN_IF_ERROR(ensure_host_weight());
  return gemm_scatter(*host_, *host_weight_, x, ih, iw, y, context);
}

Status ConvTranspose2d::gemm_scatter(Device& device, const PackedWeight& weight, const float* x,
                                     int64_t ih, int64_t iw, float* y,
                                     const ExecContext& context) const {
  const ConvTransposeSpec& s = spec_;
  const int64_t pixels = ih * iw;
  const int64_t taps = s.kh * s.kw;
  // The GEMM takes pixels as rows: the input transposed to [pixel][ic], in cache-sized tiles.
  // Scratch kept per thread across calls: fresh pages for tens of MiB each call would cost more
  // page faults than the scatter itself.
  thread_local std::vector<float> rows_scratch, columns_scratch;
  rows_scratch.resize(std::max(rows_scratch.size(), static_cast<size_t>(pixels * s.ic)));
  float* const rows = rows_scratch.data();
  constexpr int64_t kTile = 32;
  const int64_t pixel_tiles = (pixels + kTile - 1) / kTile;
  context.run(static_cast<size_t>(pixel_tiles), [&](size_t task) {
    const int64_t p0 = static_cast<int64_t>(task) * kTile, p1 = std::min(pixels, p0 + kTile);
    for (int64_t c0 = 0; c0 < s.ic; c0 += kTile) {
      const int64_t c1 = std::min(s.ic, c0 + kTile);
      for (int64_t p = p0; p < p1; ++p) {
        for (int64_t c = c0; c < c1; ++c) rows[p * s.ic + c] = x[c * pixels + p];
      }
    }
  });
  const int64_t row_width = s.oc * taps;
  const size_t column_count = static_cast<size_t>(pixels * row_width);
  columns_scratch.resize(std::max(columns_scratch.size(), column_count));
  float* const columns = columns_scratch.data();
  // run_linear refuses an fp16 GEMM whose finite operands overflowed.
  NPUFLOW_RETURN_IF_ERROR(run_linear(device, rows, pixels, weight, columns, context));
  const int64_t oh =
      conv_transpose_extent(ih, s.stride_y, s.kh, s.dil_y, s.pad_top, s.pad_bottom, s.opad_y);
  const int64_t ow =
      conv_transpose_extent(iw, s.stride_x, s.kw, s.dil_x, s.pad_left, s.pad_right, s.opad_x);
  // The input columns whose every tap lands inside the output: no bounds checks there.
  const int64_t reach = (s.kw - 1) * s.dil_x;
  const int64_t inner_lo = std::min(iw, (s.pad_left + s.stride_x - 1) / s.stride_x);
  const int64_t inner_hi =
      std::max(inner_lo, std::min(iw, ow - 1 + s.pad_left - reach >= 0
                                          ? (ow - 1 + s.pad_left - reach) / s.stride_x + 1
                                          : 0));
  // Each output channel is written by one task: the scatter needs no synchronisation. Pixels in
  // order, each pixel's taps together: every column cache line read once.
  context.run(static_cast<size_t>(s.oc), [&](size_t task) {
    const auto o = static_cast<int64_t>(task);
    float* out = y + o * oh * ow;
    std::fill(out, out + oh * ow, bias_[task]);
    for (int64_t r = 0; r < ih; ++r) {
      for (int64_t i = 0; i < s.kh; ++i) {
        const int64_t oy = r * s.stride_y - s.pad_top + i * s.dil_y;
        if (oy < 0 || oy >= oh) continue;
        float* out_row = out + oy * ow - s.pad_left;
        const float* tap = columns + r * iw * row_width + o * taps + i * s.kw;
        auto scatter_checked = [&](int64_t c) {
          for (int64_t j = 0; j < s.kw; ++j) {
            const int64_t ox = c * s.stride_x - s.pad_left + j * s.dil_x;
            if (ox >= 0 && ox < ow) out[oy * ow + ox] += tap[c * row_width + j];
          }
        };
        for (int64_t c = 0; c < inner_lo; ++c) scatter_checked(c);
        for (int64_t c = inner_lo; c < inner_hi; ++c) {
          float* to = out_row + c * s.stride_x;
          const float* from = tap + c * row_width;
          for (int64_t j = 0; j < s.kw; ++j) to[j * s.dil_x] += from[j];
        }
        for (int64_t c = inner_hi; c < iw; ++c) scatter_checked(c);
      }
    }
  });
  return Status::ok();
}

}  // namespace npuflow
