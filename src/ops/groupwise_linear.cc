#include "ops/groupwise_linear.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/fp16.h"
#include "core/scratch.h"
#include "core/strings.h"
#include "ops/weight_layout.h"
#include "quant/block_quantization.h"

namespace npuflow {

GroupwiseLinearWeight::GroupwiseLinearWeight(std::unique_ptr<PackedWeight> packed,
                                             std::vector<float> scales)
    : PackedWeight(packed->k(), packed->n(), packed->type(), packed->group()),
      packed_(std::move(packed)) {
  std::vector<uint16_t> half(scales.size());
  for (size_t i = 0; i < scales.size(); ++i) {
    half[i] = float_to_half_bits(scales[i]);
    // Bit for bit (a -0 or a NaN payload stays fp32 rather than change).
    if (std::bit_cast<uint32_t>(half_bits_to_float(half[i])) !=
        std::bit_cast<uint32_t>(scales[i])) {
      scales_ = std::move(scales);
      return;
    }
  }
  half_scales_ = std::move(half);
}

const float* GroupwiseLinearWeight::scales(std::vector<float>& buffer) const {
  if (half_scales_.empty()) return scales_.data();
  float* widened = sized(buffer, half_scales_.size());
  for (size_t i = 0; i < half_scales_.size(); ++i) widened[i] = half_bits_to_float(half_scales_[i]);
  return widened;
}

Result<std::unique_ptr<PackedWeight>> pack_groupwise_linear(Device& device, const int8_t* rows,
                                                            std::vector<float> scales, int64_t k,
                                                            int64_t n, int64_t group) {
  if (group != kQ8BlockValues || k % group != 0) {
    return invalid_argument(str_cat("group-wise linear: group ", group, " with K=", k,
                                    " (served: group 32, K a multiple of it)"));
  }
  if (static_cast<int64_t>(scales.size()) != n * (k / group)) {
    return invalid_argument(str_cat("group-wise linear: ", scales.size(), " scales for ", n,
                                    " rows of ", k / group, " groups"));
  }
  const std::vector<int8_t> kn = rows_to_k_by_n(rows, k, n);
  auto packed = device.pack_groupwise_weight(kn.data(), k, n, ElementType::kInt8, group);
  if (!packed.is_ok()) return packed.status();
  return std::unique_ptr<PackedWeight>(
      new GroupwiseLinearWeight(std::move(packed).value(), std::move(scales)));
}

Status run_groupwise_linear(Device& device, const float* x, int64_t m, const PackedWeight& weight,
                            float* y, const ExecContext& context) {
  const auto* w = dynamic_cast<const GroupwiseLinearWeight*>(&weight);
  if (w == nullptr)
    return invalid_argument("run_groupwise_linear needs a group-wise linear weight");
  const int64_t k = w->k(), n = w->n(), groups = k / w->group();
  // Zero rows (zero scales) up to the device's row multiple; their results are dropped.
  const int64_t multiple = std::max<int64_t>(1, device.row_multiple(ElementType::kInt8));
  const int64_t rows = std::max((m + multiple - 1) / multiple * multiple,
                                device.resident_min_rows(ElementType::kInt8));
  thread_local std::vector<int8_t> q_buffer;
  thread_local std::vector<float> scale_buffer, out_buffer, weight_scale_buffer;
  int8_t* q = sized(q_buffer, static_cast<size_t>(rows * k));
  float* a_scales = sized(scale_buffer, static_cast<size_t>(rows * groups));
  if (!quantize_rows_q8_blocks(x, m, k, q, a_scales, context)) {
    return unsupported("the activation holds a NaN or an infinity");
  }
  std::memset(q + m * k, 0, static_cast<size_t>((rows - m) * k));
  std::fill(a_scales + m * groups, a_scales + rows * groups, 0.0f);
  float* out = rows == m ? y : sized(out_buffer, static_cast<size_t>(rows * n));
  NPUFLOW_RETURN_IF_ERROR(device.gemm_groupwise(q, a_scales, rows, w->packed(),
                                                w->scales(weight_scale_buffer), out, context));
  if (out != y) std::copy(out, out + m * n, y);
  return Status::ok();
}

}  // namespace npuflow
