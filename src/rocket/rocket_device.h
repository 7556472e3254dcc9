// SPDX-License-Identifier: GPL-3.0-or-later
// The `rocket` device: the RK3588 NPU through librocketnpu's C API (rocket_library.h). The same
// code drives a board's librocketnpu.so.0 and, off-board, librocketnpu-sim.so: device=sim is
// this device on that library, named "sim", with the sim knobs passed as its context options.
//
// What the adapter does that the library leaves to its caller (reference/rk3588-npu.md §1):
// - Weights: K x N row-major weights are transposed into the library's B[N][K] and zero-padded
//   to its alignment (fp16: K%32, N%16; int8: K%32, N%32), exact for every dtype; outputs are
//   cropped back to N.
// - uint8 activations: the NPU multiplies int8 only; a_u8 - 128 is fed and 128 x column_sum(w)
//   added back (exact, the sums made at pack).
// - Rows: M % 4 is the caller's (row_multiple() says 4); the library refuses other M.
// - fp16 resident weights are planned at M = 256 (resident_min_rows); a call whose M plans
//   another tiling gets ROCKET_E_TILING and runs on the host.
// - fp32 results of an fp16 GEMM: the resident path writes fp16, widened here.
// - Contexts are not thread-safe: every call on one takes the device's lock (one context drives
//   all NPU cores, so nothing is lost).
// - Return codes: -1 shape, -2 tiling, -5 unsupported -> kUnsupported; -3 -> kResourceExhausted;
//   -4 -> kDeviceFailure. Every refusal or failure makes the caller run the host reference.
// - int4 (N%64) and group-wise weights: N zero-padded with zero scales; a group-wise K is the
//   caller's (a multiple of its group, which the library checks).
// - Attention: the caller's pre-scaled fp16 Q, K and transposed V go to the library as they are
//   (Fp16Attention is the library's layout), the soft-cap too.
// - Convolution: Fp16Conv2d / Fp16ConvTranspose2d are the library's layouts and go to it as they
//   are, on one rocket_conv_ctx over one fd this device opens (rocket_open) on first use and
//   closes at the end. A direct conv2d's OC is padded to 16 with zero filters and its output
//   cropped; depthwise C % 32 and a transposed pad beyond the dilated kernel are the library's
//   refusals (the library pads a transposed convolution's OC and IC itself).
#pragma once

#include <memory>
#include <string>

#include "device/device.h"
#include "rocket/rocket_library.h"

namespace npuflow::rocket {

struct RocketDeviceOptions {
  // "rocket"; "sim" when the library is librocketnpu-sim standing in for the board (device=sim).
  std::string name = "rocket";
  int workers = 0;  // worker fds per context; 0: the library's default
  // librocketnpu-sim only: its context options (rocketsim_next_context), e.g. "fail_every=7".
  std::string sim_options;
};

class RocketDevice final : public Device {
 public:
  RocketDevice(std::shared_ptr<RocketLibrary> library, RocketDeviceOptions options);
  ~RocketDevice() override;

  std::string_view name() const override;
  std::string description() const override;

  Result<std::unique_ptr<PackedWeight>> pack_int8_weight(const int8_t* weight, int64_t k,
                                                         int64_t n) override;
  Status gemm_int8(const void* a, ElementType a_type, int64_t m, const PackedWeight& w, int32_t* c,
                   const ExecContext& context) override;
  Result<std::unique_ptr<PackedWeight>> pack_float_weight(const float* weight, int64_t k,
                                                          int64_t n) override;
  Status gemm_float(const float* a, int64_t m, const PackedWeight& w, float* c,
                    const ExecContext& context) override;

  int64_t row_multiple(ElementType operand) const override;
  int64_t resident_min_rows(ElementType operand) const override;
  ElementType float_compute_type() const override { return ElementType::kFloat16; }

  Result<std::unique_ptr<PackedWeight>> pack_fp16_weight(const uint16_t* weight, int64_t k,
                                                         int64_t n) override;
  Status gemm_fp16(const uint16_t* a, int64_t m, const PackedWeight& w, void* c, ElementType c_type,
                   const ExecContext& context) override;

  // int4 (values in [-7, 7], one per byte; K%32, N%64) and group-wise int8 / int4, where the
  // library has them.
  Result<std::unique_ptr<PackedWeight>> pack_int4_weight(const int8_t* weight, int64_t k,
                                                         int64_t n) override;
  Status gemm_int4(const int8_t* a, int64_t m, const PackedWeight& w, int32_t* c,
                   const ExecContext& context) override;
  Result<std::unique_ptr<PackedWeight>> pack_groupwise_weight(const int8_t* weight, int64_t k,
                                                              int64_t n, ElementType type,
                                                              int64_t group) override;
  Status gemm_groupwise(const int8_t* a, const float* a_scales, int64_t m, const PackedWeight& w,
                        const float* w_scales, float* c, const ExecContext& context) override;
  // librocketnpu-sim prices it into its profile; on a board the host's time is real.
  void account_host_pass(double multiply_adds, double bytes) override;

  // Flash attention (rocket_flash_attn_fp16_ctx on one persistent rocket_fa_ctx), where the
  // library has it. The library pads tokens and keys itself; head_dim % 32 and dv % 16 are its
  // rules (ROCKET_E_SHAPE otherwise). The library has no relative bias: such a call runs in
  // query bands per head, each band's dense mask built from the factors (attention_in_bands).
  Status attention_fp16(const Fp16Attention& call, const ExecContext& context) override;

  // fp16 convolutions (rocket_conv2d_fp16_ctx, rocket_conv_transpose2d_fp16_ctx), where the
  // library has them.
  Status conv2d_fp16(const Fp16Conv2d& call, const ExecContext& context) override;
  Status conv_transpose2d_fp16(const Fp16ConvTranspose2d& call,
                               const ExecContext& context) override;

  // Calls per librocketnpu entry point, refusals and failures by return code; on
  // librocketnpu-sim, the simulator's session profile after them.
  std::string profile_report() const override;

  struct State;

 private:
  // A call with a relative bias, as per-head, per-query-band library calls (rocket_composed.cc).
  Status attention_in_bands(const Fp16Attention& call, const ExecContext& context);
  Result<std::unique_ptr<PackedWeight>> pack_integer(const int8_t* weight, int64_t k, int64_t n,
                                                     ElementType type, int64_t group);
  std::shared_ptr<State> state_;
};

}  // namespace npuflow::rocket
