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
  if (spec.x_zero_point != 0) {
    column_sums_.assign(n, 0);
    for (int64_t kk = 0; kk < spec.k; ++kk) {
      const int8_t* row = weight + kk * n;
      for (int64_t col = 0; col < n; ++col) column_sums_[col] += row[col];
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

void QdqEpilogue::apply(const int32_t* acc, const int64_t* row_sums, int64_t m, void* out) const {
  const int64_t n = spec_.n;
  const int64_t k = spec_.k;
  const int64_t zp_x = spec_.x_zero_point;
  for (int64_t row = 0; row < m; ++row) {
    const int32_t* acc_row = acc + row * n;
    const int64_t row_sum = needs_row_sums_ ? row_sums[row] : 0;
    for (int64_t col = 0; col < n; ++col) {
      int64_t exact = acc_row[col];
      if (zp_x != 0) exact -= zp_x * column_sums_[col];
      const int64_t zp_w = zp_w_[col];
      if (zp_w != 0) exact += zp_w * (k * zp_x - row_sum);
      const double scaled = static_cast<double>(exact) * multiplier_[col];
      const int64_t index = row * n + col;
      if (!spec_.output) {
        static_cast<float*>(out)[index] = static_cast<float>(scaled);
      } else if (spec_.output->type == ElementType::kUInt8) {
        static_cast<uint8_t*>(out)[index] = static_cast<uint8_t>(
            requantize_value(scaled, spec_.output->zero_point, ElementType::kUInt8));
      } else {
        static_cast<int8_t*>(out)[index] = static_cast<int8_t>(
            requantize_value(scaled, spec_.output->zero_point, ElementType::kInt8));
      }
    }
  }
}

}  // namespace npuflow
