#include "sim/board_cpu_model.h"

#include <algorithm>
#include <array>
#include <stdexcept>

#include "core/strings.h"

namespace npuflow::sim {
namespace {

// Tag F: fitted on a validation row of docs/simulator.md (the row is named; it is then not
// evidence for the model).
// clang-format off
constexpr std::array kConstants = {
    CostConstant{"cpu_ep_gemm_gflops", 85.09, "GFLOP/s", 'F', "fitted: seed 000 ModernBERT-large (English), 512 tokens, CPU EP 4848 ms; the rate that makes the plan's baseline on that graph equal it (tools/validate_sim.py --fit)"},
    CostConstant{"cpu_ep_int8_speedup", 2.0, "x", 'A', "assumption: MLAS's int8 GEMM (SDOT on the A76, none on the A55) over its fp32 GEMM"},
    CostConstant{"cpu_ep_transcendental_gelems", 3.0, "Gelem/s", 'A', "assumption: ORT's vectorized exp/erf at ~0.6 Gelem/s per A76 core, an A55 at a quarter of that, 8 threads"},
    CostConstant{"cpu_ep_kernel_us", 5.0, "us", 'A', "assumption: one ORT CPU kernel's dispatch and intra-op fork/join across big.LITTLE (~4 us per kernel on this x86 host for a small encoder)"},
    CostConstant{"npuflow_host_share", 0.8, "x", 'A', "assumption: npuflow's host kernels on the 4 A76 reach 0.8x the 8-thread pool (an A55 does ~1/4 of an A76's NEON fp32 work: 4 / (4 + 4/4))"},
    CostConstant{"npuflow_host_kernel_us", 5.0, "us", 'A', "assumption: one npuflow host loop's fork/join on the A76 cores (no ORT kernel dispatch)"},
};
// clang-format on

}  // namespace

const char* cpu_work_class_name(CpuWorkClass c) {
  switch (c) {
    case CpuWorkClass::kGemm:
      return "gemm";
    case CpuWorkClass::kStreaming:
      return "streaming";
    case CpuWorkClass::kTranscendental:
      return "transcendental";
    case CpuWorkClass::kShape:
      return "shape";
  }
  return "?";
}

std::span<const CostConstant> board_cpu_constants() {
  return kConstants;
}

double board_cpu_constant(std::string_view name) {
  if (auto value = constant_override(name)) return *value;
  for (const CostConstant& c : kConstants) {
    if (name == c.name) return c.value;
  }
  throw std::logic_error(str_cat("unknown board CPU constant ", name));
}

double board_cpu_us(const CpuWork& work, CpuPool pool) {
  const bool ep = pool == CpuPool::kCpuEp;
  const double share = ep ? 1.0 : board_cpu_constant("npuflow_host_share");
  const double kernel_us =
      board_cpu_constant(ep ? "cpu_ep_kernel_us" : "npuflow_host_kernel_us") * work.kernels;
  if (work.work_class == CpuWorkClass::kShape) return kernel_us;
  // DRAM bandwidth is the cluster's either way; compute scales with the cores.
  const double stream_us = work.bytes / (cost_constant("cpu_stream_gbps") * 1e3);
  double compute_us = 0;
  if (work.work_class == CpuWorkClass::kGemm) {
    const double int8 = work.int8 ? board_cpu_constant("cpu_ep_int8_speedup") : 1.0;
    compute_us = work.flops / (board_cpu_constant("cpu_ep_gemm_gflops") * int8 * share * 1e3);
  } else if (work.work_class == CpuWorkClass::kTranscendental) {
    compute_us = work.elements / (board_cpu_constant("cpu_ep_transcendental_gelems") * share * 1e3);
  }
  return kernel_us + std::max(stream_us, compute_us);
}

}  // namespace npuflow::sim
