#include "device/device.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/fp16.h"
#include "core/strings.h"

namespace npuflow {

Status check_attention_call(const Fp16Attention& call) {
  if (call.tokens <= 0 || call.kv <= 0 || call.head_dim <= 0 || call.dv <= 0 || call.heads <= 0 ||
      call.kv_heads <= 0) {
    return invalid_argument(str_cat("attention shape tokens=", call.tokens, " kv=", call.kv,
                                    " head_dim=", call.head_dim, " dv=", call.dv,
                                    " heads=", call.heads, " kv_heads=", call.kv_heads,
                                    " has an empty dimension"));
  }
  if (call.heads % call.kv_heads != 0) {
    return invalid_argument(
        str_cat(call.heads, " query heads do not share ", call.kv_heads, " kv heads evenly"));
  }
  if (call.q == nullptr || call.k == nullptr || call.v == nullptr || call.out == nullptr) {
    return invalid_argument("attention needs q, k, v and out");
  }
  if (!std::isfinite(call.softcap) || call.softcap < 0.0f) {
    return invalid_argument(
        str_cat("attention soft-cap ", call.softcap, " is not a finite value >= 0"));
  }
  const Fp16RelativeBias& rel = call.relative;
  if (rel.present() && (rel.rows == nullptr || rel.cols == nullptr || rel.grid_h <= 0 ||
                        rel.grid_w <= 0 || rel.grid_h * rel.grid_w != call.kv)) {
    return invalid_argument(str_cat("relative attention bias needs both factors over a grid of kv=",
                                    call.kv, " keys (given ", rel.grid_h, " x ", rel.grid_w, ")"));
  }
  return Status::ok();
}

void add_relative_bias(const Fp16Attention& call, int64_t head, int64_t query, float* scores) {
  const Fp16RelativeBias& rel = call.relative;
  if (!rel.present()) return;
  const int64_t row = head * call.tokens + query;
  const uint16_t* rows = rel.rows + row * rel.grid_h;
  const uint16_t* cols = rel.cols + row * rel.grid_w;
  for (int64_t y = 0; y < rel.grid_h; ++y) {
    const float row_bias = half_bits_to_float(rows[y]);
    float* tile = scores + y * rel.grid_w;
    for (int64_t x = 0; x < rel.grid_w; ++x)
      tile[x] = (tile[x] + row_bias) + half_bits_to_float(cols[x]);
  }
}

int64_t attention_bias_bytes(const Fp16Attention& call) {
  int64_t bytes = call.mask != nullptr ? call.tokens * call.kv * 2 : 0;
  if (call.relative.present()) {
    bytes += call.heads * call.tokens * (call.relative.grid_h + call.relative.grid_w) * 2;
  }
  return bytes;
}

namespace {

// One axis of a convolution's output: 0 when the padded input is shorter than the kernel's span.
int64_t conv_extent(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil) {
  const int64_t padded = in + 2 * pad, span = dil * (k - 1) + 1;
  return padded < span || stride <= 0 ? 0 : (padded - span) / stride + 1;
}

int64_t conv_transpose_extent(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t opad,
                              int64_t dil) {
  return std::max<int64_t>(0, (in - 1) * stride - 2 * pad + dil * (k - 1) + opad + 1);
}

// The checks both calls share: positive extents, strides and dilations, pads >= 0, operands,
// depthwise channels, a non-empty output.
template <typename Call>
Status check_conv_common(const Call& call, const char* op, int64_t oh, int64_t ow) {
  if (call.ic <= 0 || call.ih <= 0 || call.iw <= 0 || call.oc <= 0 || call.kh <= 0 ||
      call.kw <= 0 || call.stride_y <= 0 || call.stride_x <= 0 || call.dil_y <= 0 ||
      call.dil_x <= 0 || call.pad_top < 0 || call.pad_left < 0) {
    return invalid_argument(str_cat(op, " shape ic=", call.ic, " ih=", call.ih, " iw=", call.iw,
                                    " oc=", call.oc, " kernel ", call.kh, "x", call.kw, " stride ",
                                    call.stride_y, "x", call.stride_x, " dilation ", call.dil_y,
                                    "x", call.dil_x, " pad ", call.pad_top, ",", call.pad_left,
                                    " has an empty or negative dimension"));
  }
  if (call.input == nullptr || call.weight == nullptr || call.out == nullptr) {
    return invalid_argument(str_cat(op, " needs input, weight and out"));
  }
  if (call.depthwise && call.oc != call.ic) {
    return invalid_argument(
        str_cat("a depthwise ", op, " needs oc == ic (", call.oc, " vs ", call.ic, ")"));
  }
  if (oh < 1 || ow < 1) {
    return invalid_argument(str_cat(op, " output would be ", oh, "x", ow));
  }
  return Status::ok();
}

}  // namespace

int64_t conv2d_output_height(const Fp16Conv2d& c) {
  return conv_extent(c.ih, c.kh, c.stride_y, c.pad_top, c.dil_y);
}
int64_t conv2d_output_width(const Fp16Conv2d& c) {
  return conv_extent(c.iw, c.kw, c.stride_x, c.pad_left, c.dil_x);
}
int64_t conv_transpose2d_output_height(const Fp16ConvTranspose2d& c) {
  return conv_transpose_extent(c.ih, c.kh, c.stride_y, c.pad_top, c.opad_y, c.dil_y);
}
int64_t conv_transpose2d_output_width(const Fp16ConvTranspose2d& c) {
  return conv_transpose_extent(c.iw, c.kw, c.stride_x, c.pad_left, c.opad_x, c.dil_x);
}

Status check_conv2d_call(const Fp16Conv2d& call) {
  return check_conv_common(call, "conv2d", conv2d_output_height(call), conv2d_output_width(call));
}

Status check_conv_transpose2d_call(const Fp16ConvTranspose2d& call) {
  NPUFLOW_RETURN_IF_ERROR(check_conv_common(call, "conv_transpose2d",
                                            conv_transpose2d_output_height(call),
                                            conv_transpose2d_output_width(call)));
  if (call.opad_y < 0 || call.opad_x < 0 || call.opad_y >= call.stride_y ||
      call.opad_x >= call.stride_x) {
    return invalid_argument(str_cat("conv_transpose2d output padding ", call.opad_y, ",",
                                    call.opad_x, " is not in [0, stride) (stride ", call.stride_y,
                                    "x", call.stride_x, ")"));
  }
  return Status::ok();
}

Status Device::gemm_int8_blocks(const void* a, ElementType a_type, int64_t m, const PackedWeight& w,
                                const Int32BlockSink& sink, const ExecContext& context) {
  std::vector<int32_t> c(static_cast<size_t>(m * w.n()));
  NPUFLOW_RETURN_IF_ERROR(gemm_int8(a, a_type, m, w, c.data(), context));
  sink(0, 0, m, w.n(), c.data(), w.n());
  return Status::ok();
}

Result<std::unique_ptr<PackedWeight>> Device::pack_fp16_weight(const uint16_t*, int64_t, int64_t) {
  return unsupported(str_cat(name(), " has no fp16 GEMM"));
}

Status Device::gemm_fp16(const uint16_t*, int64_t, const PackedWeight&, void*, ElementType,
                         const ExecContext&) {
  return unsupported(str_cat(name(), " has no fp16 GEMM"));
}

Result<std::unique_ptr<PackedWeight>> Device::pack_int4_weight(const int8_t*, int64_t, int64_t) {
  return unsupported(str_cat(name(), " has no int4 GEMM"));
}

Status Device::gemm_int4(const int8_t*, int64_t, const PackedWeight&, int32_t*,
                         const ExecContext&) {
  return unsupported(str_cat(name(), " has no int4 GEMM"));
}

Result<std::unique_ptr<PackedWeight>> Device::pack_groupwise_weight(const int8_t*, int64_t, int64_t,
                                                                    ElementType, int64_t) {
  return unsupported(str_cat(name(), " has no group-wise GEMM"));
}

Status Device::gemm_groupwise(const int8_t*, const float*, int64_t, const PackedWeight&,
                              const float*, float*, const ExecContext&) {
  return unsupported(str_cat(name(), " has no group-wise GEMM"));
}

void Device::account_host_pass(double, double) {}

Status Device::attention_fp16(const Fp16Attention&, const ExecContext&) {
  return unsupported(str_cat(name(), " has no attention"));
}

Status Device::conv2d_fp16(const Fp16Conv2d&, const ExecContext&) {
  return unsupported(str_cat(name(), " has no convolution"));
}

Status Device::conv_transpose2d_fp16(const Fp16ConvTranspose2d&, const ExecContext&) {
  return unsupported(str_cat(name(), " has no transposed convolution"));
}

}  // namespace npuflow
