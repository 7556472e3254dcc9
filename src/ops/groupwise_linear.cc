#include "ops/groupwise_linear.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/fp16.h"
#include "core/scratch.h"
#include "core/strings.h"
#include "core/target_clones.h"
#include "ops/weight_layout.h"
#include "quant/block_quantization.h"

namespace npuflow {

BlockFactors::BlockFactors(std::vector<float> values) {
  std::vector<uint16_t> half(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    half[i] = float_to_half_bits(values[i]);
    // Bit for bit (a NaN payload stays fp32 rather than change).
    if (std::bit_cast<uint32_t>(half_bits_to_float(half[i])) !=
        std::bit_cast<uint32_t>(values[i])) {
      full_ = std::move(values);
      return;
    }
  }
  half_ = std::move(half);
}

BlockFactors::BlockFactors(std::vector<uint16_t> super_bits, std::vector<uint8_t> multipliers,
                           int64_t per_super)
    : half_(std::move(super_bits)), multipliers_(std::move(multipliers)), per_super_(per_super) {}

BlockFactors::BlockFactors(std::vector<uint16_t> super_bits, const std::vector<int8_t>& multipliers,
                           int64_t per_super)
    : half_(std::move(super_bits)),
      multipliers_(multipliers.size()),
      per_super_(per_super),
      signed_multipliers_(true) {
  std::memcpy(multipliers_.data(), multipliers.data(), multipliers.size());
}

const float* BlockFactors::values(std::vector<float>& buffer) const {
  if (!multipliers_.empty()) {
    float* widened = sized(buffer, multipliers_.size());
    for (size_t s = 0; s < half_.size(); ++s) {
      const float super = half_bits_to_float(half_[s]);
      for (size_t i = s * per_super_; i < (s + 1) * per_super_; ++i) {
        const int multiplier = signed_multipliers_ ? static_cast<int8_t>(multipliers_[i])
                                                   : static_cast<int>(multipliers_[i]);
        widened[i] = super * static_cast<float>(multiplier);
      }
    }
    return widened;
  }
  if (half_.empty()) return full_.data();
  float* widened = sized(buffer, half_.size());
  for (size_t i = 0; i < half_.size(); ++i) widened[i] = half_bits_to_float(half_[i]);
  return widened;
}

namespace {

// term[col] += eight_d[col] * scaled_sum + mins[col] * s over one block row of a panel (and the
// one-factor form below): cloned per x86-64 level, so that they run at the GEMM's vector width.
NPUFLOW_CLONED void accumulate_min_terms(const float* eight_d, float scaled_sum, const float* mins,
                                         float s, int64_t width, float* term) {
  for (int64_t col = 0; col < width; ++col) term[col] += eight_d[col] * scaled_sum + mins[col] * s;
}

NPUFLOW_CLONED void accumulate_merged_terms(const float* factor, float s, int64_t width,
                                            float* term) {
  for (int64_t col = 0; col < width; ++col) term[col] += factor[col] * s;
}

// The terms of Q4_1 and Q4_K blocks beyond the group-wise GEMM's sum_g d_w d_x sum(q q_x), added
// to y:
//   sum_g (8 d_w) (d_x sum(q_x)) + m_w s_x
// (the weight's values were stored as q = nibble - 8; for Q5_K, 8 reads 16). For Q4_1, s_x is
// Q8_1's fp16 block sum; for Q4_K it is d_x sum(q_x) itself and m_w = -dmin m, so the two merge
// into one factor per block, (8 d_w + m_w). Column panels in parallel, every row inside one, so
// that a panel's factors stay in cache across the rows.
// `scales`: the weight's scales as the GEMM took them (widened once per call).
void add_min_terms(const GroupwiseLinearWeight& w, const float* scales, const int8_t* q,
                   const float* x_scales, const float* x_sums, int64_t m, float* y,
                   const ExecContext& context) {
  const int64_t k = w.k(), n = w.n(), group = w.group(), groups = k / group;
  const bool merged = w.activation() == ActivationBlocks::kQ8_K;
  const auto offset = static_cast<float>(w.value_offset());
  thread_local std::vector<float> min_buffer;
  const float* mins = w.mins().values(min_buffer);
  // G x N: eight times each block's scale (plus its min when merged), and its min.
  std::vector<float> eight_d(static_cast<size_t>(groups * n));
  std::vector<float> min_gn(merged ? 0 : eight_d.size());
  for (int64_t col = 0; col < n; ++col) {
    for (int64_t g = 0; g < groups; ++g) {
      const float min = mins[col * groups + g];
      eight_d[g * n + col] = offset * scales[col * groups + g] + (merged ? min : 0.0f);
      if (!merged) min_gn[g * n + col] = min;
    }
  }
  // M x G: each activation block's d_x sum(q_x) (Q8_K's sums are just that).
  std::vector<float> scaled_sums(merged ? 0 : static_cast<size_t>(m * groups));
  for (int64_t i = 0; i < static_cast<int64_t>(scaled_sums.size()); ++i) {
    int32_t total = 0;
    for (int64_t j = 0; j < group; ++j) total += q[i * group + j];
    scaled_sums[i] = x_scales[i] * static_cast<float>(total);
  }
  constexpr int64_t kPanel = 256;
  context.run(static_cast<size_t>((n + kPanel - 1) / kPanel), [&](size_t index) {
    const int64_t col0 = static_cast<int64_t>(index) * kPanel;
    const int64_t width = std::min(kPanel, n - col0);
    float term[kPanel];
    for (int64_t row = 0; row < m; ++row) {
      std::fill(term, term + width, 0.0f);
      for (int64_t g = 0; g < groups; ++g) {
        const float s = x_sums[row * groups + g];
        if (merged) {
          accumulate_merged_terms(eight_d.data() + g * n + col0, s, width, term);
        } else {
          accumulate_min_terms(eight_d.data() + g * n + col0, scaled_sums[row * groups + g],
                               min_gn.data() + g * n + col0, s, width, term);
        }
      }
      float* out = y + row * n + col0;
      for (int64_t col = 0; col < width; ++col) out[col] += term[col];
    }
  });
}

}  // namespace

Result<std::unique_ptr<PackedWeight>> pack_groupwise_linear(Device& device, const int8_t* rows,
                                                            std::vector<float> scales, int64_t k,
                                                            int64_t n, int64_t group,
                                                            std::vector<float> mins) {
  const auto activation = mins.empty() ? ActivationBlocks::kQ8_0 : ActivationBlocks::kQ8_1;
  return pack_groupwise_linear(
      device, rows,
      GroupwiseFactors{BlockFactors(std::move(scales)), BlockFactors(std::move(mins)), activation,
                       8, group},
      k, n);
}

Result<std::unique_ptr<PackedWeight>> pack_groupwise_linear(Device& device, const int8_t* rows,
                                                            GroupwiseFactors factors, int64_t k,
                                                            int64_t n) {
  const bool k_blocks = factors.activation == ActivationBlocks::kQ8_K;
  const int64_t block = k_blocks ? kQ8KBlockValues : kQ8BlockValues;
  const int64_t group = factors.group;
  // Q8_K's scale spans 256 values, so any group dividing 32 sees one; a min pass is per 32.
  const bool group_served =
      group == kQ8BlockValues || (k_blocks && group == 16 && factors.mins.empty());
  if (!group_served || k % block != 0) {
    return invalid_argument(str_cat("group-wise linear: group ", group, " with K=", k,
                                    " (served: group 32, or 16 for Q8_K without mins; K a multiple "
                                    "of ",
                                    block, ")"));
  }
  const size_t expected = static_cast<size_t>(n * (k / group));
  if (factors.scales.size() != expected) {
    return invalid_argument(str_cat("group-wise linear: ", factors.scales.size(), " scales for ", n,
                                    " rows of ", k / group, " groups"));
  }
  // Q8_1 pairs with mins, Q8_0 never; Q8_K either way.
  const bool mins_ok = factors.activation == ActivationBlocks::kQ8_0   ? factors.mins.empty()
                       : factors.activation == ActivationBlocks::kQ8_1 ? !factors.mins.empty()
                                                                       : true;
  if (!mins_ok || (!factors.mins.empty() && factors.mins.size() != expected)) {
    return invalid_argument(
        str_cat("group-wise linear: ", factors.mins.size(), " mins for ", expected, " scales"));
  }
  const std::vector<int8_t> kn = rows_to_k_by_n(rows, k, n);
  auto packed = device.pack_groupwise_weight(kn.data(), k, n, ElementType::kInt8, group);
  if (!packed.is_ok()) return packed.status();
  return std::unique_ptr<PackedWeight>(
      new GroupwiseLinearWeight(std::move(packed).value(), std::move(factors)));
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
  thread_local std::vector<float> scale_buffer, sum_buffer, out_buffer, weight_scale_buffer;
  int8_t* q = sized(q_buffer, static_cast<size_t>(rows * k));
  float* a_scales = sized(scale_buffer, static_cast<size_t>(rows * groups));
  const bool with_mins = !w->mins().empty();
  float* a_sums = with_mins ? sized(sum_buffer, static_cast<size_t>(m * groups)) : nullptr;
  const bool finite = w->activation() == ActivationBlocks::kQ8_K
                          ? quantize_rows_q8_k(x, m, k, q, a_scales, a_sums, context, w->group())
                          : quantize_rows_q8_blocks(x, m, k, q, a_scales, context, a_sums);
  if (!finite) return unsupported("the activation holds a NaN or an infinity");
  std::memset(q + m * k, 0, static_cast<size_t>((rows - m) * k));
  std::fill(a_scales + m * groups, a_scales + rows * groups, 0.0f);
  float* out = rows == m ? y : sized(out_buffer, static_cast<size_t>(rows * n));
  const float* w_scales = w->scales().values(weight_scale_buffer);
  NPUFLOW_RETURN_IF_ERROR(
      device.gemm_groupwise(q, a_scales, rows, w->packed(), w_scales, out, context));
  if (out != y) std::copy(out, out + m * n, y);
  if (with_mins) {
    add_min_terms(*w, w_scales, q, a_scales, a_sums, m, y, context);
    // Per output and block: one multiply-add (Q8_K's merged factor) or two (Q8_1); it reads the
    // factors and sums and reads and writes y.
    const double terms = w->activation() == ActivationBlocks::kQ8_K ? 1.0 : 2.0;
    const auto outputs = static_cast<double>(m * n);
    device.account_host_pass(
        terms * outputs * static_cast<double>(groups),
        4.0 * (2.0 * outputs + 2.0 * static_cast<double>(groups) * static_cast<double>(n + m)));
  }
  return Status::ok();
}

}  // namespace npuflow
