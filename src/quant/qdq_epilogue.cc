#include "quant/qdq_epilogue.h"

#include <algorithm>
#include <cmath>

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
      column_term_[col] = static_cast<double>(spec.k * int64_t{zp_w_[col]} - column_sums_[col]);
      w_scale_[col] = spec.w_scales.size() == 1 ? spec.w_scales[0] : spec.w_scales[col];
    }
  }
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

namespace {

// Round half to even for |v| < 2^51 under the default rounding mode, in a form compilers
// vectorize (std::nearbyint does not).
constexpr double kRoundingMagic = 6755399441055744.0;  // 1.5 * 2^52

// One row of a block, branch-free so it vectorizes. Every quantity is an integer below 2^53 until
// the multiply, so the double sums are exact and the only rounding is the final one.
// On x86-64 both rows are cloned for AVX-512 and AVX2 machines, picked at load time; clang (the
// libFuzzer build) cannot clone a template, so there it is built for the baseline ISA, as it is on
// other architectures (aarch64: NEON is the baseline).
#if defined(__x86_64__)
#define NPUFLOW_CLONED __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define NPUFLOW_CLONED
#endif
#if defined(__clang__)
#define NPUFLOW_CLONED_TEMPLATE
#else
#define NPUFLOW_CLONED_TEMPLATE NPUFLOW_CLONED
#endif

template <typename Out>
NPUFLOW_CLONED_TEMPLATE void requantize_row(const int32_t* acc, const double* column_bias,
                                            const double* zp_w, double row_sum,
                                            const double* multiplier, int64_t cols, double lo,
                                            double hi, int32_t zero_point, Out* out) {
  for (int64_t c = 0; c < cols; ++c) {
    double v = (static_cast<double>(acc[c]) + (column_bias[c] - zp_w[c] * row_sum)) * multiplier[c];
    v = std::min(std::max(v, -1048576.0), 1048576.0);
    v = (v + kRoundingMagic) - kRoundingMagic;
    v = std::min(std::max(v, lo), hi);  // [type min - zp, type max - zp]
    out[c] = static_cast<Out>(static_cast<int32_t>(v) + zero_point);
  }
}

NPUFLOW_CLONED void scale_row(const int32_t* acc, const double* column_bias, const double* zp_w,
                              double row_sum, const double* multiplier, int64_t cols, float* out) {
  for (int64_t c = 0; c < cols; ++c) {
    out[c] = static_cast<float>(
        (static_cast<double>(acc[c]) + (column_bias[c] - zp_w[c] * row_sum)) * multiplier[c]);
  }
}

}  // namespace

void QdqEpilogue::apply_block(const int32_t* acc, int64_t ld, int64_t row, int64_t col,
                              int64_t rows, int64_t cols, const int64_t* row_sums, void* out,
                              const RowQuantization* quant) const {
  const int64_t n = spec_.n;
  const double* column_bias = column_bias_.data() + col;
  const double* zp_w = zp_w_double_.data() + col;
  const double* multiplier = multiplier_.data() + col;
  // Per-row activations: each row's column bias and multiplier, formed as the per-tensor ones
  // are (integers exact in double; s_x * s_w exact, one rounding dividing by s_y).
  thread_local std::vector<double> row_bias, row_multiplier;
  if (spec_.x_per_row) {
    row_bias.resize(static_cast<size_t>(cols));
    row_multiplier.resize(static_cast<size_t>(cols));
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* acc_row = acc + r * ld;
    const int64_t out_row = row + r;
    const double row_sum = needs_row_sums_ ? static_cast<double>(row_sums[out_row]) : 0.0;
    const int64_t offset = out_row * n + col;
    if (spec_.x_per_row) {
      const double zp_x = quant->zero_points[out_row];
      const double s_x = quant->scales[out_row];
      for (int64_t c = 0; c < cols; ++c) {
        row_bias[static_cast<size_t>(c)] = zp_x * column_term_[static_cast<size_t>(col + c)];
        double m = s_x * w_scale_[static_cast<size_t>(col + c)];
        if (spec_.output) m /= static_cast<double>(spec_.output->scale);
        row_multiplier[static_cast<size_t>(c)] = m;
      }
      column_bias = row_bias.data();
      multiplier = row_multiplier.data();
    }
    if (!spec_.output) {
      scale_row(acc_row, column_bias, zp_w, row_sum, multiplier, cols,
                static_cast<float*>(out) + offset);
      continue;
    }
    const int32_t zp_y = spec_.output->zero_point;
    if (spec_.output->type == ElementType::kUInt8) {
      requantize_row(acc_row, column_bias, zp_w, row_sum, multiplier, cols, 0.0 - zp_y,
                     255.0 - zp_y, zp_y, static_cast<uint8_t*>(out) + offset);
    } else {
      requantize_row(acc_row, column_bias, zp_w, row_sum, multiplier, cols, -128.0 - zp_y,
                     127.0 - zp_y, zp_y, static_cast<int8_t*>(out) + offset);
    }
  }
}

}  // namespace npuflow
