// The simulator's cost model: device and host time of one matmul call on the RK3588 NPU, and the
// modelled RK3588 CPU (A76) time for the same work. Every number it uses is one row of
// cost_constants() with its source in shared/reference/rk3588-npu.md and a tag:
//   M measured upstream, D derived by arithmetic from upstream data, U uncertain,
//   C from library code or headers, A an assumption of this model (documented, not measured).
// docs/simulator.md explains the model and how tools/calibrate_sim.py regenerates the table from
// a board's measurements.
//
// Model of one call (type, M, K, N, workers fds, weight resident or not):
//   slices, tiles, jobs  from the library's planner (rk3588_contract.h)
//   device_us = max jobs on one fd x submit_wait_floor_us
//             + 2MNK / (core_gops(type) x fd_scaling(workers)) [x attention_penalty]
//   host_us   = (bytes packed / pack_gbps + bytes read back / readback_gbps)
//               / min(workers, host_pack_threads)
// core_gops(type) is derived so that the model reproduces the measured resident throughput on
// the calibration shape (512 x 3840 x 4096, 5 fds) exactly. M < 4 is a GEMV: the measured
// slowdown against the modelled CPU replaces the model.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "sim/rk3588_contract.h"

namespace npuflow::sim {

struct CostConstant {
  const char* name;
  double value;
  const char* unit;
  char tag;  // 'M', 'D', 'U', 'C' or 'A' (see above)
  const char* source;
};

std::span<const CostConstant> cost_constants();
// The value of a named constant; throws std::logic_error for an unknown name.
double cost_constant(std::string_view name);

// For calibration (`npuflow plan --constant NAME=VALUE`, tools/validate_sim.py): replaces a
// constant of this table or of board_cpu_constants() for the rest of the process. Call it before
// any session exists. False for a name neither table has.
bool override_constant(std::string_view name, double value);
std::optional<double> constant_override(std::string_view name);

enum class GemmKind { kProjection, kAttentionScore };

struct CostQuery {
  NpuType type = NpuType::kFp16;
  int64_t m = 0, k = 0, n = 0;  // logical shape; M is padded to 4, K and N to the contract
  int workers = 5;
  bool resident = true;      // weight packed once; otherwise packed on every call
  int64_t output_bytes = 0;  // per output element; 0: the type's (fp16 2, int 4)
  GemmKind kind = GemmKind::kProjection;
  bool patched_kernel = true;  // patch 083 (IOMMU keep-attached): the 34 us floor, else 52.5
};

struct CostEstimate {
  double device_us = 0;  // submit + wait, compute
  double host_us = 0;    // activation (and weight) packing, readback
  int64_t tiles = 0;
  int64_t jobs = 0;         // all fds together
  int64_t serial_jobs = 0;  // the most on one fd
  int64_t bytes_packed = 0;
  int64_t bytes_read_back = 0;
  int64_t ops = 0;  // 2 M N K of the logical shape
  bool gemv = false;
  double total_us() const { return device_us + host_us; }
  double gops() const { return total_us() > 0 ? static_cast<double>(ops) / total_us() / 1e3 : 0; }
};

class CostModel {
 public:
  // A shape outside the contract is first padded (M to 4, K to 32, N to the dtype's multiple).
  static CostEstimate npu(const CostQuery& query);
  // librocketnpu's flash attention (rocket_flash_attn_fp16_ctx): per query head, Q K^T
  // (tokens x head_dim x kv) and P V (tokens x kv x dv) with both operands packed per call, at
  // the attention rate (attention_penalty). Chaining the heads into one job per worker
  // (ROCKET_FA_CHAIN) is not modelled, so this prices every head's submits: an upper bound.
  // bias_bytes (a dense mask, a relative bias's factors: attention_bias_bytes) are packed once
  // per call with the operands; adding them to a score tile is taken to overlap its write-back
  // in the output stage [A], so it costs no device time.
  static CostEstimate attention(int64_t tokens, int64_t kv, int64_t head_dim, int64_t dv,
                                int64_t heads, int workers, bool patched_kernel,
                                int64_t bias_bytes = 0);
  // librocketnpu's fp16 convolution (rocket_conv2d_fp16_ctx, rocket_conv_transpose2d_fp16_ctx)
  // as one M x K x N fp16 GEMM with both operands packed per call (sim/sim_conv.h ConvGemm):
  // the CNA convolves natively, so this assumes its per-MAC rate is the matmul's [A] and the
  // host packs the im2col volume M x K (it scatters only the input feature: pessimistic for
  // kernels larger than 1x1).
  static CostEstimate convolution(int64_t m, int64_t k, int64_t n, int workers,
                                  bool patched_kernel);
  // The modelled RK3588 CPU (A76 cluster) for the same matmul, in microseconds.
  static double cpu_us(NpuType type, int64_t m, int64_t k, int64_t n);
  // Derived: one fd's compute rate for `type` (GOP/s) that reproduces the calibration figure.
  static double core_gops(NpuType type);
  // Measured scaling of throughput with fds (1.0 / 2.13 / 2.94 / 3.06; more than 4 fds = 4).
  static double fd_scaling(int workers);
  // The table as text (name, value, unit, tag, source), for docs and `--verbose` output.
  static std::string describe();
};

}  // namespace npuflow::sim
