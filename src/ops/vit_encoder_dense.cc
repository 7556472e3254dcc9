// The projections of a claimed encoder: packing their weights once (float, fp16 on an NPU, or
// dynamic int8) and the one device call site that runs them.
#include <algorithm>
#include <cstring>

#include "core/fp16.h"
#include "core/strings.h"
#include "ops/vit_encoder.h"

namespace npuflow {

// A dynamic int8 projection (or q, k and v side by side): the integer weights' columns, zero
// points and scales gathered along N, resident on the device; the bias stays for project().
Result<VitEncoder::Dense> VitEncoder::pack_dynamic(const std::vector<const DenseWeights*>& parts,
                                                   int64_t k, int64_t n_total, Dense dense) {
  const ElementType type = parts.front()->dynamic->type;
  std::vector<uint8_t> weight(static_cast<size_t>(k * n_total));
  IntegerMatMulSpec spec;
  spec.k = k;
  spec.n = n_total;
  spec.float_output = true;
  int64_t col = 0;
  for (const DenseWeights* p : parts) {
    const DynamicInt8Projection& q = *p->dynamic;
    const int64_t full = p->weight.shape[1];
    const int64_t n = p->cols > 0 ? p->cols : full - p->col_begin;
    const auto fits = [full](size_t count) {
      return count == 1 || static_cast<int64_t>(count) == full;
    };
    if (q.type != type || p->transposed || q.data == nullptr || !fits(q.zero_points.size()) ||
        !fits(q.scales.size())) {
      return invalid_argument(
          "a dynamic int8 projection's weight, zero points or scales do not fit its columns");
    }
    const auto* source = static_cast<const uint8_t*>(q.data);
    for (int64_t r = 0; r < k; ++r) {
      std::memcpy(weight.data() + r * n_total + col, source + r * full + p->col_begin,
                  static_cast<size_t>(n));
    }
    for (int64_t c = p->col_begin; c < p->col_begin + n; ++c) {
      const auto at = [c](const auto& values) { return values[values.size() == 1 ? 0 : c]; };
      spec.w_zero_points.push_back(at(q.zero_points));
      spec.w_scales.push_back(at(q.scales));
      dense.bias.push_back(p->bias ? p->bias->data[c] : 0.0f);
    }
    col += n;
  }
  auto kernel = IntegerMatMul::create(str_cat(name_, " dynamic int8 ", k, "x", n_total),
                                      std::move(spec), weight.data(), type, device_,
                                      /*min_rows=*/1, logger_);
  if (!kernel.is_ok()) return kernel.status();
  dense.dynamic = std::move(kernel).value();
  batch_wide_ = true;
  return dense;
}

// An NPU computes fp16: there the weight is packed rounded to fp16 with an exact host copy for the
// calls it refuses or fails; `keep_exact` keeps it on the host (see create()'s `last_hazard`).
Result<VitEncoder::Dense> VitEncoder::pack(const std::vector<const DenseWeights*>& parts,
                                           bool keep_exact) {
  Dense dense;
  const DenseWeights& first = *parts.front();
  const int64_t k = first.transposed ? first.weight.shape[1] : first.weight.shape[0];
  int64_t n_total = 0;
  // A part's columns: [col_begin, col_begin + n) of a weight with `full` output columns.
  auto columns = [](const DenseWeights& p) {
    const int64_t full = p.transposed ? p.weight.shape[0] : p.weight.shape[1];
    return std::pair{full, p.cols > 0 ? p.cols : full - p.col_begin};
  };
  for (const DenseWeights* p : parts) {
    if (p->weight.shape.size() != 2) return invalid_argument("a projection weight is not 2-D");
    const int64_t pk = p->transposed ? p->weight.shape[1] : p->weight.shape[0];
    if (pk != k) return invalid_argument("fused projections disagree on K");
    const auto [full, n] = columns(*p);
    if (p->col_begin < 0 || n <= 0 || p->col_begin + n > full ||
        (p->bias && p->bias->count() != full)) {
      return invalid_argument(str_cat("projection columns [", p->col_begin, ", ", p->col_begin + n,
                                      ") do not fit a weight of ", full));
    }
    n_total += n;
  }
  dense.k = k;
  dense.n = n_total;
  const auto dynamic_parts =
      std::count_if(parts.begin(), parts.end(), [](const DenseWeights* p) { return p->dynamic; });
  if (dynamic_parts != 0) {
    if (dynamic_parts != static_cast<int64_t>(parts.size())) {
      return invalid_argument("fused projections mix dynamic int8 and float weights");
    }
    return pack_dynamic(parts, k, n_total, std::move(dense));
  }
  std::vector<float> w(static_cast<size_t>(k * n_total));
  int64_t col = 0;
  for (const DenseWeights* p : parts) {
    const auto [full, n] = columns(*p);
    const int64_t c0 = p->col_begin;
    for (int64_t r = 0; r < k; ++r) {
      for (int64_t c = 0; c < n; ++c) {
        w[static_cast<size_t>(r * n_total + col + c)] =
            p->transposed ? p->weight.data[(c0 + c) * k + r] : p->weight.data[r * full + c0 + c];
      }
    }
    for (int64_t c = 0; c < n; ++c) {
      dense.bias.push_back(p->bias ? p->bias->data[c0 + c] : 0.0f);
    }
    col += n;
  }
  if (host_) {
    // An NPU computes fp16: pack the weight rounded to fp16, and keep an exact host copy for
    // the calls it refuses (contract, tiling) or fails.
    if (!keep_exact) {
      std::vector<uint16_t> half(w.size());
      auto packed = floats_to_half_in_range(w.data(), w.size(), half.data())
                        ? device_->pack_fp16_weight(half.data(), k, n_total)
                        : Result<std::unique_ptr<PackedWeight>>(
                              unsupported("a weight is beyond fp16's range"));
      if (packed.is_ok()) {
        dense.packed = std::move(packed).value();
        dense.fp16 = true;
      } else {
        logger_.warning(str_cat(name_, ": ", device_->name(), " cannot hold a ", k, "x", n_total,
                                " weight (", packed.status().to_string(),
                                "); it runs on the host"));
      }
    }
    auto fallback = host_->pack_float_weight(w.data(), k, n_total);
    if (!fallback.is_ok()) return fallback.status();
    dense.fallback = std::move(fallback).value();
    return dense;
  }
  auto packed = device_->pack_float_weight(w.data(), k, n_total);
  if (!packed.is_ok()) return packed.status();
  dense.packed = std::move(packed).value();
  return dense;
}

Status VitEncoder::project(const Dense& dense, const float* x, int64_t rows_padded, int64_t rows,
                           float* y, const ExecContext& context) const {
  // The one device call site.
  if (dense.dynamic) {
    // Zero pad rows leave DynamicQuantizeLinear's range alone: it always holds 0.
    NPUFLOW_RETURN_IF_ERROR(dense.dynamic->run_dynamic(x, rows_padded, y, context));
  } else if (!dense.fp16 && !dense.packed) {
    // Packed for the host at compile time, which logged why; not a device refusal.
    if (!dense.fallback) return internal_error("a projection has no packed weight");
    NPUFLOW_RETURN_IF_ERROR(host_->gemm_float(x, rows_padded, *dense.fallback, y, context));
  } else {
    auto on_device = [&]() -> Status {
      if (!dense.fp16) return device_->gemm_float(x, rows_padded, *dense.packed, y, context);
      // fp16 operands, fp32 results; rows padded with zeros up to what the resident plan serves.
      const int64_t device_rows =
          std::max(rows_padded, device_->resident_min_rows(ElementType::kFloat16));
      thread_local std::vector<uint16_t> half;
      thread_local std::vector<float> padded_out;
      half.assign(static_cast<size_t>(device_rows * dense.k), 0);
      if (!floats_to_half_in_range(x, static_cast<size_t>(rows_padded * dense.k), half.data())) {
        return unsupported("an activation is beyond fp16's range");
      }
      float* out = y;
      if (device_rows != rows_padded) {
        padded_out.resize(static_cast<size_t>(device_rows * dense.n));
        out = padded_out.data();
      }
      NPUFLOW_RETURN_IF_ERROR(device_->gemm_fp16(half.data(), device_rows, *dense.packed, out,
                                                 ElementType::kFloat32, context));
      if (out != y) std::copy(out, out + rows_padded * dense.n, y);
      return Status::ok();
    };
    if (!dense.fallback) {  // the session's device is the host: nothing to fall back to
      NPUFLOW_RETURN_IF_ERROR(on_device());
    } else {
      NPUFLOW_RETURN_IF_ERROR(projection_fallback_.run(
          on_device, [&] { return host_->gemm_float(x, rows_padded, *dense.fallback, y, context); },
          fallback_calls_, logger_,
          [&](const Status& status) {
            return str_cat(name_, ": ", device_->name(), " refused a ", rows_padded, "x", dense.k,
                           "x", dense.n, " projection (", status.to_string(),
                           "); such calls run on the host (reported once)");
          }));
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    float* out = y + r * dense.n;
    for (int64_t c = 0; c < dense.n; ++c) out[c] += dense.bias[static_cast<size_t>(c)];
  }
  return Status::ok();
}

}  // namespace npuflow
