// The exact epilogue of an A8W8 QDQ MatMul group (DequantizeLinear -> MatMul [-> QuantizeLinear]):
//
//   acc'[m][n] = sum_k (a - zp_x)(w - zp_w[n])
//              = acc - zp_x * colsum_w[n] - zp_w[n] * rowsum_a[m] + K * zp_x * zp_w[n]   (int64)
//   int out:   y = saturate(round_half_to_even(acc' * s_x * s_w[n] / s_y) + zp_y)
//   float out: y = float(acc' * s_x * s_w[n])
//
// The activation's scale and zero point are per tensor, or per row (s_x[m], zp_x[m]: the
// per-token quantization of LLM QDQ exports), given with each run.
//
// The output zero point is added after rounding: rounding after an integer shift would move
// exact ties to the wrong neighbour. The scale product is formed in double, so the only rounding
// is the final one. Quantized outputs are requantized at float32 width where that provably gives
// the same integers, and in double near rounding ties (quant/requantize_rows.h).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/element_type.h"

namespace npuflow {

struct QuantizedOutput {
  float scale = 1.0f;
  int32_t zero_point = 0;
  ElementType type = ElementType::kInt8;  // int8 or uint8
};

// Everything the epilogue needs, with the weight already in int8 (a uint8 weight is stored as
// w - 128 with its zero points shifted by -128, which leaves every product unchanged).
struct QdqGemmSpec {
  int64_t k = 0;
  int64_t n = 0;
  float x_scale = 1.0f;
  int32_t x_zero_point = 0;
  // The activation's scale and zero point come per row with each run (RowQuantization); the two
  // above are then unused.
  bool x_per_row = false;
  std::vector<float> w_scales;            // 1 (per tensor) or n (per output column)
  std::vector<int32_t> w_zero_points;     // 1 or n, already shifted for uint8 weights
  std::optional<QuantizedOutput> output;  // absent: float output
};

// One run's per-row activation quantization: row m's scale and zero point, m rows each.
struct RowQuantization {
  const float* scales = nullptr;
  const int32_t* zero_points = nullptr;
};

class QdqEpilogue {
 public:
  // weight: row-major K x N int8, used once for the column sums when zp_x != 0.
  QdqEpilogue(const QdqGemmSpec& spec, const int8_t* weight);

  bool needs_row_sums() const { return needs_row_sums_; }
  bool has_column_sums() const { return !column_sums_.empty(); }

  // Row sums of the activation, only meaningful when needs_row_sums().
  void compute_row_sums(const void* a, ElementType a_type, int64_t m, int64_t* row_sums) const;

  // acc: M x N int32 accumulators; out: int8/uint8 (quantized output) or float, M x N. `rows`
  // carries the per-row activation quantization when the spec has x_per_row (else null).
  void apply(const int32_t* acc, const int64_t* row_sums, int64_t m, void* out,
             const RowQuantization* rows = nullptr) const;

  // The same for one block of the result: `rows` x `cols` accumulators at (row, col) with row
  // stride `ld`, written into the full M x N output. row_sums (and `quant`) are indexed by
  // absolute row.
  void apply_block(const int32_t* acc, int64_t ld, int64_t row, int64_t col, int64_t rows,
                   int64_t cols, const int64_t* row_sums, void* out,
                   const RowQuantization* quant = nullptr) const;

  const QdqGemmSpec& spec() const { return spec_; }

  // Whether quantized outputs take the float32 row kernel (per-row activations decide per row).
  bool fast_requantize() const { return fast_requantize_; }

 private:
  void prepare_fast_requantize();

  QdqGemmSpec spec_;
  bool needs_row_sums_ = false;
  std::vector<int64_t> column_sums_;  // empty unless zp_x != 0
  std::vector<int32_t> zp_w_;         // expanded to n
  std::vector<double> multiplier_;    // s_x * s_w[n] / s_y (or without s_y for float out)
  std::vector<double> column_bias_;   // -zp_x * colsum_w[n] + K * zp_x * zp_w[n]
  std::vector<double> zp_w_double_;
  // Per-row activations: K * zp_w[n] - colsum_w[n] (times zp_x[m], the column bias of row m),
  // and s_w[n] / 1 (times s_x[m], then divided by s_y, the multiplier of row m).
  std::vector<int64_t> column_term_;
  std::vector<double> w_scale_;
  // The fast row kernel's terms: the integers above modulo 2^32, the multipliers in float.
  bool fast_requantize_ = false;
  int64_t max_weight_offset_ = 0;
  std::vector<uint32_t> column_bias_bits_;
  std::vector<uint32_t> zp_w_bits_;
  std::vector<float> multiplier_float_;
};

// Round half to even, then add the zero point, then saturate to the output type's range.
int32_t requantize_value(double scaled, int32_t zero_point, ElementType type);

}  // namespace npuflow
