// The `sim` device: a simulator of the RK3588 NPU behind librocketnpu. It enforces the library's
// shape contract (rk3588_contract.h), computes with the NPU's arithmetic (sim_numerics.h), keeps
// the board's limits (3 cores, worker fds with a 4 GiB IOVA window each, resident weights
// counted against it) and charges each call to the calibrated cost model (cost_model.h). Its
// session profile says what a board would have done. See docs/simulator.md.
//
// Serving choices (what a caller may rely on):
// - Weights: K and N are zero-padded to the dtype's contract at pack time (exact for every
//   dtype); SimOptions::pad_weights = false refuses them instead, as the bare library does.
// - Rows: M is the caller's: M % 4 (and M > 1) or ROCKET_E_SHAPE -> kUnsupported.
//   row_multiple() says 4 so callers pad.
// - uint8 activations: the hardware multiplies int8 only. a_u8 = a_s8 + 128, so the device
//   feeds a_u8 - 128 and adds 128 * column_sum(w) (exact, computed once at pack).
// - fp32 GEMM (gemm_float): refused (the NPU has no fp32 matmul; tf32 is not modelled).
// - fp16 resident weights are planned at M = 256; a call whose M plans another (Kt, Nt, nKt)
//   gets ROCKET_E_TILING (the library's -2), as librocketnpu's prepacked path does.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "device/device.h"
#include "sim/rk3588_contract.h"
#include "sim/sim_numerics.h"

namespace npuflow::sim {

struct SimOptions {
  int workers = 5;                 // worker fds (ROCKET_N_THREADS default), 1..8
  KAccMode kacc = KAccMode::kNpu;  // fp16 K accumulation (`sim_kacc`)
  int64_t fail_every = 0;          // every Nth accepted call fails its submit; 0: never
  // Tests only: every Nth accepted call returns with its first output element far off (a wrong
  // answer with a success status, which only a check against the host reference catches).
  int64_t corrupt_every = 0;
  uint64_t iova_bytes_per_fd = kIovaBytesPerFd;
  bool pad_weights = true;     // false: misaligned K/N weights are refused
  bool asym = true;            // fp16 ASYM tiling (library default on)
  int64_t int4_kt_cap = 480;   // what in-model callers pass; 0: the library's bare Kt
  bool patched_kernel = true;  // cost model: 34 us submit floor (else 52.5 us stock)
};

struct SimProfile {
  int64_t calls = 0;  // accepted GEMM, attention and convolution calls (failed ones included)
  int64_t attention_calls = 0;  // of which attention
  int64_t conv_calls = 0;       // of which convolution (direct, depthwise or transposed)
  int64_t refused = 0;          // contract, tiling or IOVA refusals
  int64_t failed = 0;           // injected submit failures
  int64_t corrupted = 0;        // calls whose output was corrupted on purpose (corrupt_every)
  int64_t submits = 0;          // jobs (<= 64 tiles each), all fds
  int64_t tiles = 0;
  int64_t weights = 0;  // resident now
  int64_t resident_bytes = 0;
  int64_t bytes_packed = 0;  // weights and activations written into device buffers
  int64_t bytes_read_back = 0;
  double device_ms = 0;  // modelled: submit + wait + compute
  double host_ms = 0;  // modelled: packing, readback and npuflow's host passes, on the board's CPU
  double cpu_ms = 0;   // modelled: the same calls on the RK3588 CPU alone
  double emulation_ms = 0;  // wall time this machine spent emulating (not a board figure)
};

class SimDevice final : public Device {
 public:
  explicit SimDevice(const SimOptions& options = {});
  ~SimDevice() override;

  std::string_view name() const override { return "sim"; }
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
  Result<std::unique_ptr<PackedWeight>> pack_int4_weight(const int8_t* weight, int64_t k,
                                                         int64_t n) override;
  Status gemm_int4(const int8_t* a, int64_t m, const PackedWeight& w, int32_t* c,
                   const ExecContext& context) override;
  Result<std::unique_ptr<PackedWeight>> pack_groupwise_weight(const int8_t* weight, int64_t k,
                                                              int64_t n, ElementType type,
                                                              int64_t group) override;
  Status gemm_groupwise(const int8_t* a, const float* a_scales, int64_t m, const PackedWeight& w,
                        const float* w_scales, float* c, const ExecContext& context) override;
  // Priced as npuflow's host kernels on the board's A76 cores (sim/board_cpu_model.h), into
  // host_ms.
  void account_host_pass(double multiply_adds, double bytes) override;

  // librocketnpu's flash attention (sim/sim_attention.h), priced by CostModel::attention.
  Status attention_fp16(const Fp16Attention& call, const ExecContext& context) override;
  // librocketnpu's fp16 convolutions (sim/sim_conv.h: its contract, the host reference's exact
  // result), priced by CostModel::convolution.
  Status conv2d_fp16(const Fp16Conv2d& call, const ExecContext& context) override;
  Status conv_transpose2d_fp16(const Fp16ConvTranspose2d& call,
                               const ExecContext& context) override;

  std::string profile_report() const override;

  SimProfile profile() const;
  const SimOptions& options() const;
  // IOVA bytes resident weights hold on worker fd `fd`.
  uint64_t iova_in_use(int fd) const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace npuflow::sim
