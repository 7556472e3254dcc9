// The RK3588's CPU as the board figures meet it: ONNX Runtime's CPU EP (the baseline every
// published ratio is measured against: fp32 MLAS-class kernels, ORT_ENABLE_ALL, 8 intra-op
// threads over 4 A76 and 4 A55 cores) and npuflow's own host kernels inside a claimed subgraph
// (norms, activations, softmax, host attention, fp32<->fp16 conversion) on the 4 A76 cores.
// Work is priced by class: GEMM FLOPs at a rate, streaming bytes at DRAM bandwidth,
// transcendental elements at a rate, plus a per-kernel dispatch cost. Every number is a row of
// board_cpu_constants() with a tag and a source, as in cost_model.h.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "sim/cost_model.h"

namespace npuflow::sim {

enum class CpuWorkClass {
  kGemm,            // 2·M·K·N FLOPs (MatMul, Gemm, Conv as im2col GEMM)
  kStreaming,       // bytes in + out (Add, Mul, norms, Transpose, Concat, Cast, ...)
  kTranscendental,  // an exp/erf/tanh per element (Softmax, Gelu, Erf, Sigmoid, ...)
  kShape,           // metadata only (Reshape, Shape, Unsqueeze, Constant, ...)
};

const char* cpu_work_class_name(CpuWorkClass c);

struct CpuWork {
  CpuWorkClass work_class = CpuWorkClass::kShape;
  double flops = 0;     // kGemm
  double bytes = 0;     // every class but kShape: what the kernel reads and writes
  double elements = 0;  // kTranscendental
  bool int8 = false;    // kGemm on 8-bit operands (QLinearMatMul, MatMulInteger, ...)
  int kernels = 1;      // dispatches (each pays the per-kernel cost)
};

enum class CpuPool {
  kCpuEp,        // ORT's intra-op pool: 8 threads, 4 A76 + 4 A55
  kNpuflowHost,  // npuflow's host kernels: the 4 A76
};

std::span<const CostConstant> board_cpu_constants();
double board_cpu_constant(std::string_view name);

// Microseconds for `work` on the board's CPU.
double board_cpu_us(const CpuWork& work, CpuPool pool);

}  // namespace npuflow::sim
