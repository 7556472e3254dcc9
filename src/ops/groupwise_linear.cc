#include "ops/groupwise_linear.h"

#include <algorithm>
#include <cstring>

#include "core/scratch.h"
#include "core/strings.h"
#include "ops/weight_layout.h"
#include "quant/block_quantization.h"

namespace npuflow {

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
  thread_local std::vector<float> scale_buffer, out_buffer;
  int8_t* q = sized(q_buffer, static_cast<size_t>(rows * k));
  float* a_scales = sized(scale_buffer, static_cast<size_t>(rows * groups));
  if (!quantize_rows_q8_blocks(x, m, k, q, a_scales, context)) {
    return unsupported("the activation holds a NaN or an infinity");
  }
  std::memset(q + m * k, 0, static_cast<size_t>((rows - m) * k));
  std::fill(a_scales + m * groups, a_scales + rows * groups, 0.0f);
  float* out = rows == m ? y : sized(out_buffer, static_cast<size_t>(rows * n));
  NPUFLOW_RETURN_IF_ERROR(
      device.gemm_groupwise(q, a_scales, rows, w->packed(), w->scales(), out, context));
  if (out != y) std::copy(out, out + m * n, y);
  return Status::ok();
}

}  // namespace npuflow
