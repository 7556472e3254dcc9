#include "quant/integer_matmul.h"

#include <algorithm>
#include <cstring>

#include "core/scratch.h"
#include "core/strings.h"
#include "device/int8_gemm_loop.h"
#include "ops/device_rows.h"
#include "quant/dynamic_quantize.h"
#include "quant/symmetric_quantization.h"
#include "route/matmul_route.h"

namespace npuflow {
namespace {

// Per-thread scratch so steady-state calls allocate nothing once the largest shape was seen.
struct Scratch {
  std::vector<int32_t> accumulators;
  std::vector<int64_t> row_sums;
  std::vector<int64_t> column_terms;
  std::vector<float> multipliers;
  std::vector<uint8_t> quantized;
  std::vector<uint8_t> padded_rows;
  std::vector<float> row_scales;
  std::vector<int64_t> float_rows;
};

Scratch& thread_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

}  // namespace

// What one call adds to the constant part: the column term for this call's zero point, the
// row sums of this call's activation, and the fp32 scale products s_a * s_w[n].
struct IntegerMatMul::CallTerms {
  const int64_t* column_terms = nullptr;
  const int64_t* row_sums = nullptr;  // null when every zp_w is 0
  const float* multipliers = nullptr;
  const float* row_scales = nullptr;  // per-row activation scales: multipliers are then s_w
};

Result<std::unique_ptr<IntegerMatMul>> IntegerMatMul::create(
    std::string name, IntegerMatMulSpec spec, const void* weight, ElementType weight_type,
    std::shared_ptr<Device> device, int64_t min_rows, Logger logger) {
  const auto fits_columns = [&](size_t size) {
    return size == 1 || static_cast<int64_t>(size) == spec.n;
  };
  if (spec.k <= 0 || spec.n <= 0 || spec.k > kMaxIntegerMatMulK ||
      !fits_columns(spec.w_zero_points.size()) ||
      (spec.float_output && !fits_columns(spec.w_scales.size())) ||
      (!spec.bias.empty() && static_cast<int64_t>(spec.bias.size()) != spec.n)) {
    return invalid_argument(str_cat(
        name, ": a ", spec.k, "x", spec.n, " weight with ", spec.w_zero_points.size(),
        " zero points, ", spec.w_scales.size(), " scales, ", spec.bias.size(), " bias values"));
  }
  const int64_t count = spec.k * spec.n;
  std::vector<int8_t> plain(static_cast<size_t>(count));
  if (weight_type == ElementType::kUInt8) {
    const auto* source = static_cast<const uint8_t*>(weight);
    for (int64_t i = 0; i < count; ++i) plain[i] = static_cast<int8_t>(source[i] - 128);
    for (int32_t& zp : spec.w_zero_points) zp -= 128;
  } else if (weight_type == ElementType::kInt8) {
    const auto* source = static_cast<const int8_t*>(weight);
    plain.assign(source, source + count);
  } else {
    return invalid_argument(
        str_cat(name, ": weight type ", element_type_name(weight_type), " is not int8 or uint8"));
  }
  // Per-column zero points and scales from here on, so the epilogue indexes them directly.
  if (spec.w_zero_points.size() == 1) spec.w_zero_points.assign(spec.n, spec.w_zero_points[0]);
  if (spec.float_output && spec.w_scales.size() == 1)
    spec.w_scales.assign(spec.n, spec.w_scales[0]);
  auto packed = device->pack_int8_weight(plain.data(), spec.k, spec.n);
  std::unique_ptr<PackedWeight> resident;
  if (packed.is_ok()) {
    resident = std::move(packed).value();
  } else {
    logger.warning(str_cat("npu_integer_pack_fallback ", name, " k=", spec.k, " n=", spec.n, ": ",
                           packed.status().to_string(), "; every call runs on the host loop"));
  }
  auto kernel = std::unique_ptr<IntegerMatMul>(
      new IntegerMatMul(std::move(name), std::move(spec), std::move(plain), std::move(resident),
                        std::move(device), min_rows, std::move(logger)));
  if (!kernel->packed_) kernel->fallback_.mark_logged();  // said above, once
  return kernel;
}

IntegerMatMul::IntegerMatMul(std::string name, IntegerMatMulSpec spec, std::vector<int8_t> weight,
                             std::unique_ptr<PackedWeight> packed, std::shared_ptr<Device> device,
                             int64_t min_rows, Logger logger)
    : name_(std::move(name)),
      spec_(std::move(spec)),
      weight_(std::move(weight)),
      packed_(std::move(packed)),
      device_(std::move(device)),
      min_rows_(min_rows),
      logger_(std::move(logger)) {
  column_sums_.assign(static_cast<size_t>(spec_.n), 0);
  for (int64_t kk = 0; kk < spec_.k; ++kk) {
    const int8_t* row = weight_.data() + kk * spec_.n;
    for (int64_t col = 0; col < spec_.n; ++col) column_sums_[col] += row[col];
  }
  needs_row_sums_ = std::any_of(spec_.w_zero_points.begin(), spec_.w_zero_points.end(),
                                [](int32_t zp) { return zp != 0; });
}

void IntegerMatMul::apply_block(const CallTerms& terms, const int32_t* acc, int64_t ld, int64_t row,
                                int64_t col, int64_t rows, int64_t cols, void* out) const {
  const int64_t n = spec_.n;
  const int32_t* zp_w = spec_.w_zero_points.data() + col;
  const int64_t* column_terms = terms.column_terms + col;
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* acc_row = acc + r * ld;
    const int64_t row_sum = terms.row_sums ? terms.row_sums[row + r] : 0;
    const int64_t offset = (row + r) * n + col;
    if (!spec_.float_output) {
      int32_t* y = static_cast<int32_t*>(out) + offset;
      for (int64_t c = 0; c < cols; ++c) {
        y[c] = static_cast<int32_t>(acc_row[c] + column_terms[c] - zp_w[c] * row_sum);
      }
      continue;
    }
    float* y = static_cast<float*>(out) + offset;
    const float* multipliers = terms.multipliers + col;
    // Cast, Mul and Add are separate fp32 operations in the graph: separate loops here, so no
    // compiler may contract them into one fused multiply-add.
    if (terms.row_scales) {
      const float row_scale = terms.row_scales[row + r];
      for (int64_t c = 0; c < cols; ++c) {
        const auto exact = static_cast<int32_t>(acc_row[c] + column_terms[c] - zp_w[c] * row_sum);
        y[c] = static_cast<float>(exact) * (row_scale * multipliers[c]);
      }
    } else {
      for (int64_t c = 0; c < cols; ++c) {
        const auto exact = static_cast<int32_t>(acc_row[c] + column_terms[c] - zp_w[c] * row_sum);
        y[c] = static_cast<float>(exact) * multipliers[c];
      }
    }
    if (!spec_.bias.empty()) {
      const float* bias = spec_.bias.data() + col;
      for (int64_t c = 0; c < cols; ++c) y[c] = y[c] + bias[c];
    }
  }
}

Status IntegerMatMul::run(const void* a, ElementType a_type, int32_t a_zero_point, float a_scale,
                          int64_t m, void* out, const ExecContext& context) const {
  if (a_type != ElementType::kInt8 && a_type != ElementType::kUInt8) {
    return invalid_argument(str_cat(name_, ": activation is ", element_type_name(a_type)));
  }
  const int64_t n = spec_.n;
  const int64_t k = spec_.k;
  Scratch& scratch = thread_scratch();
  CallTerms terms;
  int64_t* column_terms = sized(scratch.column_terms, static_cast<size_t>(n));
  for (int64_t col = 0; col < n; ++col) {
    column_terms[col] = int64_t{a_zero_point} * (k * spec_.w_zero_points[col] - column_sums_[col]);
  }
  terms.column_terms = column_terms;
  if (spec_.float_output) {
    float* multipliers = sized(scratch.multipliers, static_cast<size_t>(n));
    for (int64_t col = 0; col < n; ++col) multipliers[col] = a_scale * spec_.w_scales[col];
    terms.multipliers = multipliers;
  }
  if (needs_row_sums_) {
    int64_t* row_sums = sized(scratch.row_sums, static_cast<size_t>(m));
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
    terms.row_sums = row_sums;
  }
  return run_terms(a, a_type, m, terms, out, context);
}

Status IntegerMatMul::run_terms(const void* a, ElementType a_type, int64_t m,
                                const CallTerms& terms, void* out,
                                const ExecContext& context) const {
  const int64_t n = spec_.n;
  const int64_t k = spec_.k;
  Scratch& scratch = thread_scratch();
  auto host_loop = [&] {
    int32_t* acc = sized(scratch.accumulators, static_cast<size_t>(m * n));
    int8_gemm_loop(a, a_type, m, k, weight_.data(), n, acc);
    apply_block(terms, acc, n, 0, 0, m, n, out);
    return Status::ok();
  };
  if (!integer_gemm_on_device(m, min_rows_) || !packed_) {
    (packed_ ? counters_.host_row_calls : counters_.fallback_calls)++;
    return host_loop();
  }
  const DeviceRows device_a =
      pad_to_device_rows(*device_, a_type, a, m, static_cast<size_t>(k), scratch.padded_rows);
  const Int32BlockSink sink = [&](int64_t row, int64_t col, int64_t rows, int64_t cols,
                                  const int32_t* block, int64_t ld) {
    apply_block(terms, block, ld, row, col, rows, cols, out);
  };
  return fallback_.run(
      [&] {
        NPUFLOW_RETURN_IF_ERROR(
            gemm_int8_real_rows(*device_, device_a, a_type, m, *packed_, sink, context));
        counters_.device_calls++;
        return Status::ok();
      },
      host_loop, counters_.fallback_calls, logger_,
      [&](const Status& status) {
        return str_cat("npu_integer_fallback ", name_, " m=", m, " k=", k, " n=", n, ": ",
                       status.to_string(), "; running on the host loop (reported once)");
      });
}

Status IntegerMatMul::run_dynamic(const float* x, int64_t m, float* out,
                                  const ExecContext& context) const {
  const int64_t count = m * spec_.k;
  const DynamicQuantization params = dynamic_quantization_params(x, count, context);
  uint8_t* q = sized(thread_scratch().quantized, static_cast<size_t>(count));
  quantize_uint8(x, count, params, q, context);
  return run(q, ElementType::kUInt8, params.zero_point, params.scale, m, out, context);
}

Status IntegerMatMul::run_rows(const float* x, int64_t m, float* out,
                               const ExecContext& context) const {
  const int64_t k = spec_.k;
  const int64_t n = spec_.n;
  if (!spec_.float_output || needs_row_sums_) {
    return internal_error(str_cat(name_,
                                  ": per-row quantization needs a float output and a "
                                  "symmetric weight"));
  }
  Scratch& scratch = thread_scratch();
  auto* q = reinterpret_cast<int8_t*>(sized(scratch.quantized, static_cast<size_t>(m * k)));
  float* scales = sized(scratch.row_scales, static_cast<size_t>(m));
  std::vector<int64_t>& float_rows = scratch.float_rows;
  float_rows.clear();
  for (int64_t row = 0; row < m; ++row) {
    if (!quantize_row_symmetric(x + row * k, k, q + row * k, &scales[row])) {
      std::fill(q + row * k, q + (row + 1) * k, int8_t{0});
      scales[row] = 0.0f;
      float_rows.push_back(row);
    }
  }
  int64_t* column_terms = sized(scratch.column_terms, static_cast<size_t>(n));
  std::fill(column_terms, column_terms + n, int64_t{0});  // zero points are 0
  CallTerms terms;
  terms.column_terms = column_terms;
  terms.multipliers = spec_.w_scales.data();
  terms.row_scales = scales;
  // run_terms may take the scratch's other buffers, not these three.
  NPUFLOW_RETURN_IF_ERROR(run_terms(q, ElementType::kInt8, m, terms, out, context));
  for (int64_t row : float_rows) {
    const float* xr = x + row * k;
    float* y = out + row * n;
    for (int64_t c = 0; c < n; ++c) {
      float sum = 0.0f;
      for (int64_t i = 0; i < k; ++i) {
        sum += xr[i] * (static_cast<float>(weight_[i * n + c]) * spec_.w_scales[c]);
      }
      y[c] = spec_.bias.empty() ? sum : sum + spec_.bias[c];
    }
  }
  return Status::ok();
}

}  // namespace npuflow
