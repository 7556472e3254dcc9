#include "sim/sim_conv.h"

#include "core/strings.h"
#include "sim/rk3588_contract.h"

namespace npuflow::sim {
namespace {

constexpr int64_t kOcGroup = 16;         // the direct conv weight oc group
constexpr int64_t kDepthwiseGroup = 32;  // G, ROCKET_CONV_DW_GROUP's default
constexpr int64_t kIcAtom = 32;          // the direct path zero-pads IC to a multiple of 32
constexpr int64_t kFeatureBudget = 8 * kCbufBankBytes;  // CONV_FEAT_BUDGET (rocket_conv.c)
constexpr int64_t kHalfBytes = 2;

Status check_depthwise(bool depthwise, int64_t channels, const char* op) {
  if (depthwise && channels % kDepthwiseGroup != 0) {
    return unsupported(str_cat("ROCKET_E_SHAPE: a depthwise ", op, " needs C % ", kDepthwiseGroup,
                               " (C = ", channels, ")"));
  }
  return Status::ok();
}

// rocket_conv2d_plan's CBUF fit. The library tiles over output channels, output space and
// (depthwise) channels, so only the smallest tile must fit one pass: one kernel (KH x KW over IC
// padded to 32, or over G channels depthwise) in one bank, and the dilated window of one output
// pixel over those channels within the feature budget. Past either the plan returns -4, the number
// of ROCKET_E_DEVICE. A transposed call is planned as its stride-1 forward lowering: the same
// kernel, channels and dilation.
template <typename Call>
Status check_cbuf_fit(const Call& call, const char* op) {
  const int64_t channels = call.depthwise ? kDepthwiseGroup : round_up(call.ic, kIcAtom);
  const int64_t kernel = call.kh * call.kw * channels * kHalfBytes;
  const int64_t window =
      ((call.kh - 1) * call.dil_y + 1) * ((call.kw - 1) * call.dil_x + 1) * channels * kHalfBytes;
  if (kernel > kCbufBankBytes || window > kFeatureBudget) {
    return unsupported(str_cat("ROCKET_E_DEVICE: ", op, "'s smallest tile does not fit the CBUF (",
                               kernel, " kernel bytes of ", kCbufBankBytes, ", ", window,
                               " window bytes of ", kFeatureBudget, ")"));
  }
  return Status::ok();
}

}  // namespace

Status check_conv2d_shape(const Fp16Conv2d& call) {
  if (!call.depthwise && call.oc % kOcGroup != 0) {
    return unsupported(str_cat("ROCKET_E_SHAPE: conv2d needs OC % ", kOcGroup, " (OC = ", call.oc,
                               "); the caller pads the filters"));
  }
  NPUFLOW_RETURN_IF_ERROR(check_depthwise(call.depthwise, call.ic, "conv2d"));
  return check_cbuf_fit(call, "conv2d");
}

Status check_conv_transpose2d_shape(const Fp16ConvTranspose2d& call) {
  if (call.pad_top > call.dil_y * (call.kh - 1) || call.pad_left > call.dil_x * (call.kw - 1)) {
    return unsupported(str_cat("ROCKET_E_TILING: conv_transpose2d pad ", call.pad_top, ",",
                               call.pad_left, " beyond the dilated kernel's ",
                               call.dil_y * (call.kh - 1), ",", call.dil_x * (call.kw - 1),
                               " would crop the lowered input"));
  }
  NPUFLOW_RETURN_IF_ERROR(check_depthwise(call.depthwise, call.ic, "conv_transpose2d"));
  return check_cbuf_fit(call, "conv_transpose2d");
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
