#include "sim/sim_conv.h"

#include "core/strings.h"
#include "sim/rk3588_contract.h"

namespace npuflow::sim {
namespace {

constexpr int64_t kOcGroup = 16;         // the direct conv weight oc group
constexpr int64_t kDepthwiseGroup = 32;  // G, ROCKET_CONV_DW_GROUP's default

Status check_depthwise(bool depthwise, int64_t channels, const char* op) {
  if (depthwise && channels % kDepthwiseGroup != 0) {
    return unsupported(str_cat("ROCKET_E_SHAPE: a depthwise ", op, " needs C % ", kDepthwiseGroup,
                               " (C = ", channels, ")"));
  }
  return Status::ok();
}

}  // namespace

Status check_conv2d_shape(const Fp16Conv2d& call) {
  if (!call.depthwise && call.oc % kOcGroup != 0) {
    return unsupported(str_cat("ROCKET_E_SHAPE: conv2d needs OC % ", kOcGroup, " (OC = ", call.oc,
                               "); the caller pads the filters"));
  }
  return check_depthwise(call.depthwise, call.ic, "conv2d");
}

Status check_conv_transpose2d_shape(const Fp16ConvTranspose2d& call) {
  if (call.pad_top > call.dil_y * (call.kh - 1) || call.pad_left > call.dil_x * (call.kw - 1)) {
    return unsupported(str_cat("ROCKET_E_TILING: conv_transpose2d pad ", call.pad_top, ",",
                               call.pad_left, " beyond the dilated kernel's ",
                               call.dil_y * (call.kh - 1), ",", call.dil_x * (call.kw - 1),
                               " would crop the lowered input"));
  }
  return check_depthwise(call.depthwise, call.ic, "conv_transpose2d");
}

ConvGemm conv2d_gemm(const Fp16Conv2d& call) {
  const int64_t taps = call.kh * call.kw;
  return ConvGemm{conv2d_output_height(call) * conv2d_output_width(call),
                  call.depthwise ? taps : call.ic * taps, round_up(call.oc, kOcGroup)};
}

ConvGemm conv_transpose2d_gemm(const Fp16ConvTranspose2d& call) {
  const int64_t taps = call.kh * call.kw;
  return ConvGemm{conv_transpose2d_output_height(call) * conv_transpose2d_output_width(call),
                  call.depthwise ? taps : call.ic * taps, call.oc};
}

}  // namespace npuflow::sim
