// One fused MatMulInteger group, ready to run: the ONNX Runtime forms of dynamic int8 and of the
// QOperator MatMulInteger.
//
//   acc'[m][n] = sum_k (a - zp_a)(w - zp_w[n])
//              = acc + zp_a * (K * zp_w[n] - colsum_w[n]) - zp_w[n] * rowsum_a[m]    (int64, exact)
//   int32 out: y = acc'                                   (MatMulInteger alone)
//   float out: y = float(acc') * float(s_a * s_w[n]) [+ bias[n]]
//
// The float epilogue repeats the graph's own fp32 operations one by one (Cast, then Mul by the
// product the graph's scale Mul forms, then Add), so it rounds exactly where the CPU EP does.
// The activation zero point and scale may change per call (DynamicQuantizeLinear), so the
// column term is formed per call. The GEMM runs on the device with its weight resident; rows
// are padded to the device's row multiple, small calls and device refusals take the host loop.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/log.h"
#include "device/device.h"
#include "ops/device_fallback.h"

namespace npuflow {

struct IntegerMatMulSpec {
  int64_t k = 0;
  int64_t n = 0;
  std::vector<int32_t> w_zero_points;  // 1 or n, in the weight's own type
  bool float_output = false;
  std::vector<float> w_scales;  // float output: 1 or n
  std::vector<float> bias;      // float output: empty or n
};

struct IntegerMatMulCounters {
  std::atomic<int64_t> device_calls{0};
  std::atomic<int64_t> host_row_calls{0};
  std::atomic<int64_t> fallback_calls{0};
};

// The largest K for which every acc' fits in int32 (|a - zp_a|, |w - zp_w| <= 255).
constexpr int64_t kMaxIntegerMatMulK = 33025;

class IntegerMatMul {
 public:
  // weight: row-major K x N int8 or uint8 (a uint8 weight is stored shifted by -128).
  static Result<std::unique_ptr<IntegerMatMul>> create(std::string name, IntegerMatMulSpec spec,
                                                       const void* weight, ElementType weight_type,
                                                       std::shared_ptr<Device> device,
                                                       int64_t min_rows, Logger logger);

  // a: M x K int8/uint8 with its zero point; a_scale only matters for a float output.
  // out: M x N int32 or float.
  Status run(const void* a, ElementType a_type, int32_t a_zero_point, float a_scale, int64_t m,
             void* out, const ExecContext& context) const;

  // x: M x K float, quantized first exactly as DynamicQuantizeLinear does (over all M x K).
  Status run_dynamic(const float* x, int64_t m, float* out, const ExecContext& context) const;

  // x: M x K float, each row quantized symmetrically to int8 with its own scale
  // (quant/symmetric_quantization.h); out = float(acc) * (s_x[m] * s_w[n]) [+ bias]. For a
  // weight quantized the same way (zero points 0). A row holding a NaN or an infinity is
  // computed in fp32 against the dequantized weight instead, so it propagates as a float MatMul.
  Status run_rows(const float* x, int64_t m, float* out, const ExecContext& context) const;

  const IntegerMatMulSpec& spec() const { return spec_; }
  const IntegerMatMulCounters& counters() const { return counters_; }
  size_t resident_bytes() const { return packed_ ? packed_->resident_bytes() : 0; }
  bool on_device() const { return packed_ != nullptr; }

 private:
  IntegerMatMul(std::string name, IntegerMatMulSpec spec, std::vector<int8_t> weight,
                std::unique_ptr<PackedWeight> packed, std::shared_ptr<Device> device,
                int64_t min_rows, Logger logger);

  struct CallTerms;
  Status run_terms(const void* a, ElementType a_type, int64_t m, const CallTerms& terms, void* out,
                   const ExecContext& context) const;
  void apply_block(const CallTerms& terms, const int32_t* acc, int64_t ld, int64_t row, int64_t col,
                   int64_t rows, int64_t cols, void* out) const;

  std::string name_;
  IntegerMatMulSpec spec_;                // zero points shifted for a uint8 weight, expanded to n
  std::vector<int8_t> weight_;            // plain K x N copy for the host loop
  std::vector<int64_t> column_sums_;      // sum_k w[k][n] of the stored int8 weight
  std::unique_ptr<PackedWeight> packed_;  // null: the device could not pack it
  std::shared_ptr<Device> device_;
  int64_t min_rows_;
  Logger logger_;
  bool needs_row_sums_ = false;
  mutable IntegerMatMulCounters counters_;
  DeviceFallback fallback_;
};

}  // namespace npuflow
