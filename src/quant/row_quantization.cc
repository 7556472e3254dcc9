#include "quant/row_quantization.h"

#include <cmath>

#include "core/strings.h"

namespace npuflow {

Status expand_row_quantization(const std::vector<int64_t>& dims, int64_t axis,
                               const std::vector<float>& scales,
                               const std::vector<int32_t>& zero_points,
                               RowQuantizationBuffers& out) {
  const auto rank = static_cast<int64_t>(dims.size());
  if (rank < 2 || axis < 0 || axis >= rank - 1) {
    return invalid_argument(str_cat("per-row activation scales along axis ", axis,
                                    " of an activation of shape ", shape_string(dims)));
  }
  const int64_t count = dims[static_cast<size_t>(axis)];
  auto fits = [&](size_t size) { return size == 1 || static_cast<int64_t>(size) == count; };
  if (!fits(scales.size()) || !fits(zero_points.size())) {
    return invalid_argument(str_cat("the activation's DequantizeLinear has ", scales.size(),
                                    " scales and ", zero_points.size(),
                                    " zero points for a dimension of ", count));
  }
  // A zero scale (dynamic quantization of an all-zero row) dequantizes to zeros, as the epilogue's
  // s_x * s_w product does; a non-finite one has no exact form.
  for (float s : scales) {
    if (!std::isfinite(s))
      return invalid_argument(str_cat("an activation scale is ", s, ": not a finite number"));
  }
  // Rows are the flattened leading dims: the index along `axis` advances every `stride` rows.
  int64_t stride = 1, rows = 1;
  for (int64_t i = axis + 1; i < rank - 1; ++i) stride *= dims[static_cast<size_t>(i)];
  for (int64_t i = 0; i < rank - 1; ++i) rows *= dims[static_cast<size_t>(i)];
  out.scales.resize(static_cast<size_t>(rows));
  out.zero_points.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const auto index = static_cast<size_t>(count > 0 ? (r / stride) % count : 0);
    out.scales[static_cast<size_t>(r)] = scales.size() == 1 ? scales[0] : scales[index];
    out.zero_points[static_cast<size_t>(r)] =
        zero_points.size() == 1 ? zero_points[0] : zero_points[index];
  }
  return Status::ok();
}

}  // namespace npuflow
