#include "ops/float_linear.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/fp16.h"
#include "core/strings.h"
#include "ops/weight_layout.h"

namespace npuflow {

Result<std::unique_ptr<PackedWeight>> pack_linear_weight(Device& device, const float* rows,
                                                         int64_t k, int64_t n) {
  const std::vector<float> kn = rows_to_k_by_n(rows, k, n);
  if (device.float_compute_type() != ElementType::kFloat16) {
    return device.pack_float_weight(kn.data(), k, n);
  }
  // An NPU computes in fp16: round the weight once here.
  std::vector<uint16_t> half(kn.size());
  for (size_t i = 0; i < kn.size(); ++i) {
    half[i] = float_to_half_bits(kn[i]);
    if ((half[i] & 0x7c00) == 0x7c00 && std::isfinite(kn[i])) {
      return unsupported(str_cat("weight ", kn[i], " is beyond fp16's range"));
    }
  }
  return device.pack_fp16_weight(half.data(), k, n);
}

Status run_linear(Device& device, const float* x, int64_t m, const PackedWeight& weight, float* y,
                  const ExecContext& context) {
  if (weight.type() != ElementType::kFloat16) return device.gemm_float(x, m, weight, y, context);
  // fp16 operands with fp32 results; rows padded with zeros to the device's row multiple and to
  // the rows its resident plan serves.
  const int64_t k = weight.k(), n = weight.n();
  const int64_t multiple = std::max<int64_t>(1, device.row_multiple(ElementType::kFloat16));
  const int64_t rows = std::max((m + multiple - 1) / multiple * multiple,
                                device.resident_min_rows(ElementType::kFloat16));
  thread_local std::vector<uint16_t> half;
  thread_local std::vector<float> padded_out;
  half.assign(static_cast<size_t>(rows * k), 0);
  bool inputs_finite = true;
  for (int64_t i = 0; i < m * k; ++i) {
    const uint16_t bits = float_to_half_bits(x[i]);
    if ((bits & 0x7c00) == 0x7c00) {  // infinity or NaN in fp16
      if (std::isfinite(x[i])) {
        return unsupported(str_cat("activation ", x[i], " is beyond fp16's range"));
      }
      inputs_finite = false;
    }
    half[static_cast<size_t>(i)] = bits;
  }
  float* out = y;
  if (rows != m) {
    padded_out.resize(static_cast<size_t>(rows * n));
    out = padded_out.data();
  }
  NPUFLOW_RETURN_IF_ERROR(
      device.gemm_fp16(half.data(), rows, weight, out, ElementType::kFloat32, context));
  // The device must not turn finite operands into infinities: a sum beyond fp16's range is the
  // host reference's to compute (the weight was finite in fp16 when packed).
  if (inputs_finite && !std::all_of(out, out + m * n, [](float v) { return std::isfinite(v); })) {
    return unsupported("an fp16 result overflowed");
  }
  if (out != y) std::copy(out, out + m * n, y);
  return Status::ok();
}

void reference_linear(const float* x, int64_t m, int64_t k, int64_t n,
                      const std::function<void(int64_t row, float* out)>& weight_row, float* y,
                      const ExecContext& context) {
  constexpr int64_t kRowsPerTask = 16;
  const int64_t tasks = (n + kRowsPerTask - 1) / kRowsPerTask;
  context.run(static_cast<size_t>(tasks), [&](size_t task) {
    std::vector<float> w(static_cast<size_t>(k));
    const int64_t first = static_cast<int64_t>(task) * kRowsPerTask;
    for (int64_t col = first; col < std::min(n, first + kRowsPerTask); ++col) {
      weight_row(col, w.data());
      for (int64_t row = 0; row < m; ++row) {
        const float* xr = x + row * k;
        float sum = 0.0f;
        for (int64_t i = 0; i < k; ++i) sum += xr[i] * w[i];
        y[row * n + col] = sum;
      }
    }
  });
}

}  // namespace npuflow
