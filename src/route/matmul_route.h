// Routing rules for a weight x activation matrix product offered by a runtime (the ggml front
// end's MUL_MAT). Runtime-neutral: the front end describes the candidate in these terms and asks.
// The rules are the device contract (K%32, N%16, a resident 2-D weight) plus the row threshold
// below which a launch costs more than it saves (decode stays on the CPU).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace npuflow {

// Weight formats the float linear path can make resident (dequantized once).
enum class WeightFormat : uint8_t {
  kOther,  // anything else: refused
  kF32,
  kF16,
  kBF16,
  kQ8_0,
  kQ4_0,
  kQ4_1,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kMXFP4,
};

const char* weight_format_name(WeightFormat format);
bool weight_format_is_quantized(WeightFormat format);
// Elements per quantization block (1 for float formats, 0 for kOther).
int64_t weight_format_block(WeightFormat format);

struct MatmulCandidate {
  WeightFormat weight = WeightFormat::kOther;
  bool weight_is_leaf = false;     // a constant: not produced by an op, not a view of one
  bool weight_contiguous = false;  // rows of K elements, densely packed
  bool weight_is_2d = false;       // no batch dimensions (ne2 == ne3 == 1)
  bool activation_f32 = false;
  bool activation_contiguous = false;
  bool output_f32 = false;
  bool output_contiguous = false;
  bool special_hint = false;  // an op hint this path does not implement (e.g. Hadamard)
  int64_t k = 0;              // reduction length
  int64_t n = 0;              // weight rows = output columns
  int64_t m = 0;              // activation rows (all batch dimensions folded in)
};

struct MatmulRouting {
  int64_t min_m = 128;        // float weights (F32/F16/BF16)
  int64_t min_m_quant = 128;  // quantized weights
};

// The device contract on shapes, shared by every device so that placement does not depend on
// which device sits underneath (sim and rocket enforce it; host simply honours it).
inline constexpr int64_t kContractKMultiple = 32;
inline constexpr int64_t kContractNMultiple = 16;

struct RouteVerdict {
  bool accept = false;
  const char* reason = "";  // a stable token when refused, e.g. "m_below_min"
};

RouteVerdict route_matmul(const MatmulCandidate& candidate, const MatmulRouting& routing);

std::string describe(const MatmulCandidate& candidate);

// An integer GEMM of a claimed ONNX node (QDQ, MatMulInteger) runs on the device from `min_rows`
// rows (the min_rows knob); below that a launch costs more than it saves and it runs on the host.
// The kernels and `npuflow plan` both ask this.
inline bool integer_gemm_on_device(int64_t rows, int64_t min_rows) {
  return rows >= min_rows;
}

// The row threshold a session's integer kernels use on `device_name`. The host device has no
// launch to amortize: its own (oneDNN) kernels beat the plain loop at every row count (a Qwen3
// projection at M=1: 0.63 ms against 2.1 ms), so it takes every row; other devices take the knob.
inline int64_t integer_min_rows(std::string_view device_name, int64_t knob) {
  return device_name == "host" ? 1 : knob;
}

}  // namespace npuflow
