// librocketnpu's fp16 convolutions (rocket_conv2d_fp16*, rocket_conv_transpose2d_fp16*; RU
// include/rocket_conv.h; shared/reference/rk3588-npu.md §1 "Convolution") as the simulator takes
// them:
// - Contract (the bare library's; an adapter pads what it can): direct conv2d OC % 16 (the conv
//   weight oc group; IC is padded by the driver), depthwise C % 32 (the depthwise channel group
//   G = 32), both ROCKET_E_SHAPE otherwise. A transposed convolution is lowered onto a stride-1
//   forward one over the interior-dilated, border-padded input, whose border is
//   dil * (k - 1) - pad: a pad beyond dil * (k - 1) would crop, which the library's plan refuses
//   with -2 (ROCKET_E_TILING). Its direct form zero-pads any OC and IC itself; depthwise C % 32.
// - Numerics: rocket_conv.h states both paths HW-validated bit-exact against the library's CPU
//   oracles, "fp32 accumulate, fp16 store" (rocket_conv2d_ref_fp16; the transposed one against
//   the direct scatter reference). The simulator therefore computes exactly what the host
//   reference (host/fp16_conv.h) computes, by calling it.
// - CBUF fit (rocket_conv2d_plan): the library tiles the direct path over OC and output space and
//   depthwise over channels and space, so it refuses only a call whose smallest tile overflows:
//   one kernel beyond a 32 KB bank (KH x KW x IC, IC padded to 32; KH x KW x 32 depthwise) or
//   one output pixel's dilated window beyond the 8-bank feature budget. Its plan returns -4
//   (ROCKET_E_DEVICE's number) there; so does the simulator.
// - Not modelled: the tiles themselves (a call is priced as one GEMM), the fused activation and
//   int8 entries.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "device/device.h"

namespace npuflow::sim {

// kUnsupported with the library's code (ROCKET_E_SHAPE / ROCKET_E_TILING / ROCKET_E_DEVICE) for a
// call (already checked by check_conv2d_call / check_conv_transpose2d_call) outside the library's
// contract.
Status check_conv2d_shape(const Fp16Conv2d& call);
Status check_conv_transpose2d_shape(const Fp16ConvTranspose2d& call);

// The one fp16 GEMM a call is priced as (CostModel::convolution): M output pixels, K taps per
// output, N output channels. A transposed convolution runs on the upsampled problem (the library
// materialises the dilated input), so M is its output's pixels and K all of IC x KH x KW.
struct ConvGemm {
  int64_t m = 0, k = 0, n = 0;
};
ConvGemm conv2d_gemm(const Fp16Conv2d& call);
ConvGemm conv_transpose2d_gemm(const Fp16ConvTranspose2d& call);

}  // namespace npuflow::sim
