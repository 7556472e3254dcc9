#include "quant/qdq_epilogue.h"

#include <algorithm>
#include <cmath>

#include "quant/requantize_rows.h"

namespace npuflow {

int32_t requantize_value(double scaled, int32_t zero_point, ElementType type) {
  const int32_t lo = type == ElementType::kUInt8 ? 0 : -128;
  const int32_t hi = type == ElementType::kUInt8 ? 255 : 127;
  // Clamp first so the conversion below cannot overflow; anything past +-2^20 saturates anyway.
  scaled = std::clamp(scaled, -1048576.0, 1048576.0);
  // nearbyint rounds half to even under the default rounding mode, as ONNX specifies.
  const int64_t rounded = static_cast<int64_t>(std::nearbyint(scaled)) + zero_point;
  return static_cast<int32_t>(std::clamp<int64_t>(rounded, lo, hi));
}

QdqEpilogue::QdqEpilogue(const QdqGemmSpec& spec, const int8_t* weight) : spec_(spec) {
  const int64_t n = spec.n;
  zp_w_.resize(n);
  multiplier_.resize(n);
  for (int64_t col = 0; col < n; ++col) {
    zp_w_[col] = spec.w_zero_points.size() == 1 ? spec.w_zero_points[0] : spec.w_zero_points[col];
    const double s_w = spec.w_scales.size() == 1 ? spec.w_scales[0] : spec.w_scales[col];
    double multiplier = static_cast<double>(spec.x_scale) * s_w;
    if (spec.output) multiplier /= static_cast<double>(spec.output->scale);
    multiplier_[col] = multiplier;
    if (zp_w_[col] != 0) needs_row_sums_ = true;
  }
  if (spec.x_zero_point != 0 || spec.x_per_row) {
    column_sums_.assign(n, 0);
    for (int64_t kk = 0; kk < spec.k; ++kk) {
      const int8_t* row = weight + kk * n;
      for (int64_t col = 0; col < n; ++col) column_sums_[col] += row[col];
    }
  }
  // The per-column part of the correction, -zp_x * colsum_w[n] + K * zp_x * zp_w[n], and zp_w
  // itself as doubles: integers far below 2^53, so exact.
  column_bias_.assign(n, 0.0);
  zp_w_double_.resize(n);
  const int64_t zp_x = spec.x_zero_point;
  for (int64_t col = 0; col < n; ++col) {
    zp_w_double_[col] = zp_w_[col];
    if (zp_x != 0) {
      column_bias_[col] =
          static_cast<double>(-zp_x * column_sums_[col] + spec.k * zp_x * int64_t{zp_w_[col]});
    }
  }
  if (spec.x_per_row) {
    column_term_.resize(n);
    w_scale_.resize(n);
    for (int64_t col = 0; col < n; ++col) {
      column_term_[col] = spec.k * int64_t{zp_w_[col]} - column_sums_[col];
      w_scale_[col] = spec.w_scales.size() == 1 ? spec.w_scales[0] : spec.w_scales[col];
    }
  }
  if (spec.output) prepare_fast_requantize();
}

void QdqEpilogue::prepare_fast_requantize() {
  const int64_t n = spec_.n;
  max_weight_offset_ = 0;
  for (int64_t col = 0; col < n; ++col) {
    max_weight_offset_ = std::max(max_weight_offset_, max_weight_offset(zp_w_[col]));
  }
  zp_w_bits_.resize(n);
  column_bias_bits_.resize(n);
  multiplier_float_.resize(n);
  for (int64_t col = 0; col < n; ++col) {
    zp_w_bits_[col] = static_cast<uint32_t>(zp_w_[col]);
    // column_bias_ holds an exact integer; modulo 2^32 is all the wrapping kernel needs.
    column_bias_bits_[col] = static_cast<uint32_t>(static_cast<int64_t>(column_bias_[col]));
    multiplier_float_[col] = static_cast<float>(multiplier_[col]);
  }
  if (spec_.x_per_row) {
    // Each row's multipliers and zero point are checked as the row runs.
    fast_requantize_ = true;
    return;
  }
  fast_requantize_ = accumulators_fit_int32(spec_.k, spec_.x_zero_point, max_weight_offset_) &&
                     std::all_of(multiplier_.begin(), multiplier_.end(),
                                 [](double m) { return fast_requantize_multiplier_ok(m); });
}

void QdqEpilogue::compute_row_sums(const void* a, ElementType a_type, int64_t m,
                                   int64_t* row_sums) const {
  const int64_t k = spec_.k;
  for (int64_t row = 0; row < m; ++row) {
    int64_t sum = 0;
    if (a_type == ElementType::kUInt8) {
      const uint8_t* p = static_cast<const uint8_t*>(a) + row * k;
      for (int64_t kk = 0; kk < k; ++kk) sum += p[kk];
    } else {
      const int8_t* p = static_cast<const int8_t*>(a) + row * k;
      for (int64_t kk = 0; kk < k; ++kk) sum += p[kk];
    }
    row_sums[row] = sum;
  }
}

void QdqEpilogue::apply(const int32_t* acc, const int64_t* row_sums, int64_t m, void* out,
                        const RowQuantization* rows) const {
  apply_block(acc, spec_.n, 0, 0, m, spec_.n, row_sums, out, rows);
}

void QdqEpilogue::apply_block(const int32_t* acc, int64_t ld, int64_t row, int64_t col,
                              int64_t rows, int64_t cols, const int64_t* row_sums, void* out,
                              const RowQuantization* quant) const {
  const int64_t n = spec_.n;
  RequantizeRowTerms terms;
  terms.cols = cols;
  terms.column_bias = column_bias_.data() + col;
  terms.zp_w = zp_w_double_.data() + col;
  terms.multiplier = multiplier_.data() + col;
  if (spec_.output) {
    terms.column_bias_bits = column_bias_bits_.data() + col;
    terms.zp_w_bits = zp_w_bits_.data() + col;
    terms.multiplier_float = multiplier_float_.data() + col;
  }
  // Per-row activations: each row's column bias and multiplier, formed as the per-tensor ones
  // are (integers exact in double; s_x * s_w exact, one rounding dividing by s_y).
  thread_local std::vector<double> row_bias, row_multiplier;
  thread_local std::vector<uint32_t> row_bias_bits;
  thread_local std::vector<float> row_multiplier_float;
  if (spec_.x_per_row) {
    row_bias.resize(static_cast<size_t>(cols));
    row_multiplier.resize(static_cast<size_t>(cols));
    if (spec_.output) {
      row_bias_bits.resize(static_cast<size_t>(cols));
      row_multiplier_float.resize(static_cast<size_t>(cols));
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t out_row = row + r;
    terms.acc = acc + r * ld;
    const int64_t row_sum = needs_row_sums_ ? row_sums[out_row] : 0;
    terms.row_sum = static_cast<double>(row_sum);
    terms.row_sum_bits = static_cast<uint32_t>(row_sum);
    const int64_t offset = out_row * n + col;
    bool fast = fast_requantize_;
    if (spec_.x_per_row) {
      const int32_t zp_x = quant->zero_points[out_row];
      const double s_x = quant->scales[out_row];
      for (int64_t c = 0; c < cols; ++c) {
        const auto i = static_cast<size_t>(c);
        row_bias[i] = zp_x * static_cast<double>(column_term_[static_cast<size_t>(col + c)]);
        double m = s_x * w_scale_[static_cast<size_t>(col + c)];
        if (spec_.output) m /= static_cast<double>(spec_.output->scale);
        row_multiplier[i] = m;
      }
      terms.column_bias = row_bias.data();
      terms.multiplier = row_multiplier.data();
      if (spec_.output) {
        fast = accumulators_fit_int32(spec_.k, zp_x, max_weight_offset_);
        for (int64_t c = 0; c < cols && fast; ++c) {
          const auto i = static_cast<size_t>(c);
          fast = fast_requantize_multiplier_ok(row_multiplier[i]);
          row_bias_bits[i] =
              static_cast<uint32_t>(int64_t{zp_x} * column_term_[static_cast<size_t>(col + c)]);
          row_multiplier_float[i] = static_cast<float>(row_multiplier[i]);
        }
        terms.column_bias_bits = row_bias_bits.data();
        terms.multiplier_float = row_multiplier_float.data();
      }
    }
    if (!spec_.output) {
      scale_row(terms, static_cast<float*>(out) + offset);
      continue;
    }
    const RequantizeOutput output{spec_.output->zero_point,
                                  spec_.output->type == ElementType::kUInt8};
    void* out_row_start = static_cast<uint8_t*>(out) + offset;  // one byte per value
    if (fast) {
      requantize_row_fast(terms, output, out_row_start);
    } else {
      requantize_row_exact(terms, output, out_row_start);
    }
  }
}

}  // namespace npuflow
