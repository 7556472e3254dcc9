#include "quant/qdq_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/scratch.h"
#include "core/strings.h"
#include "device/int8_gemm_loop.h"
#include "ops/device_rows.h"
#include "route/matmul_route.h"

namespace npuflow {
namespace {

// Per-thread scratch so steady-state calls allocate nothing once the largest shape was seen.
struct Scratch {
  std::vector<int32_t> accumulators;
  std::vector<int64_t> row_sums;
  std::vector<uint8_t> activations;
  std::vector<uint8_t> padded_rows;
};

Scratch& thread_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

}  // namespace

Result<std::unique_ptr<QdqMatMul>> QdqMatMul::create(std::string name, QdqGemmSpec spec,
                                                     const void* weight, ElementType weight_type,
                                                     std::shared_ptr<Device> device,
                                                     int64_t min_rows, Logger logger) {
  // The epilogue indexes scales and zero points per column: they must be per tensor or per
  // column. The matcher refuses anything else; this keeps a bad spec a status, not a crash.
  const auto fits_columns = [&](size_t size) {
    return size == 1 || static_cast<int64_t>(size) == spec.n;
  };
  if (spec.k < 0 || spec.n < 0 || !fits_columns(spec.w_scales.size()) ||
      spec.w_zero_points.size() != spec.w_scales.size()) {
    return invalid_argument(str_cat(name, ": ", spec.w_scales.size(), " weight scales and ",
                                    spec.w_zero_points.size(), " zero points for a ", spec.k, "x",
                                    spec.n, " weight"));
  }
  const int64_t count = spec.k * spec.n;
  std::vector<int8_t> plain(count);
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
  auto packed = device->pack_int8_weight(plain.data(), spec.k, spec.n);
  std::unique_ptr<PackedWeight> resident;
  if (packed.is_ok()) {
    resident = std::move(packed).value();
  } else {
    // The device cannot or will not hold this weight (contract, IOVA budget, a shape it calls
    // invalid, device error): the group still runs, on the host loop, with the same exact result.
    // A pack refusal never fails the session.
    logger.warning(str_cat("npu_qdq_pack_fallback ", name, " k=", spec.k, " n=", spec.n, ": ",
                           packed.status().to_string(), "; every call runs on the host loop"));
  }
  QdqEpilogue epilogue(spec, plain.data());
  if (epilogue.has_column_sums()) {
    logger.verbose(str_cat("qdq_colsum ", name, " k=", spec.k, " n=", spec.n));
  }
  auto kernel = std::unique_ptr<QdqMatMul>(
      new QdqMatMul(std::move(name), std::move(epilogue), std::move(plain), std::move(resident),
                    std::move(device), min_rows, std::move(logger)));
  if (!kernel->packed_) kernel->fallback_.mark_logged();  // said above, once
  return kernel;
}

QdqMatMul::QdqMatMul(std::string name, QdqEpilogue epilogue, std::vector<int8_t> weight,
                     std::unique_ptr<PackedWeight> packed, std::shared_ptr<Device> device,
                     int64_t min_rows, Logger logger)
    : name_(std::move(name)),
      epilogue_(std::move(epilogue)),
      weight_(std::move(weight)),
      packed_(std::move(packed)),
      device_(std::move(device)),
      min_rows_(min_rows),
      logger_(std::move(logger)) {}

Status QdqMatMul::run(const void* a, ElementType a_type, int64_t m, void* out,
                      const ExecContext& context, const RowQuantization* rows) const {
  const QdqGemmSpec& spec = epilogue_.spec();
  if (spec.x_per_row &&
      (rows == nullptr || rows->scales == nullptr || rows->zero_points == nullptr))
    return internal_error(str_cat(name_, ": a per-row group ran without its row scales"));
  Scratch& scratch = thread_scratch();
  int64_t* row_sums = nullptr;
  if (epilogue_.needs_row_sums()) {
    row_sums = sized(scratch.row_sums, static_cast<size_t>(m));
    epilogue_.compute_row_sums(a, a_type, m, row_sums);
  }
  auto host_loop = [&] {
    int32_t* acc = sized(scratch.accumulators, static_cast<size_t>(m * spec.n));
    int8_gemm_loop(a, a_type, m, spec.k, weight_.data(), spec.n, acc);
    epilogue_.apply(acc, row_sums, m, out, rows);
    return Status::ok();
  };
  if (!integer_gemm_on_device(m, min_rows_)) {
    counters_.host_row_calls++;
    if (logger_.enabled(LogLevel::kTrace)) {
      logger_.trace(str_cat("npu_qdq_host_rows ", name_, " m=", m, " k=", spec.k, " n=", spec.n,
                            " min=", min_rows_));
    }
    return host_loop();
  }
  if (!packed_) {
    counters_.fallback_calls++;  // the weight never made it onto the device (logged at create)
    return host_loop();
  }
  // int8 and uint8 rows: one byte per element.
  const DeviceRows device_a =
      pad_to_device_rows(*device_, a_type, a, m, static_cast<size_t>(spec.k), scratch.padded_rows);
  if (device_a.padded) counters_.padded_calls++;
  // The epilogue runs on each block as the device finishes it, on the device's worker thread.
  const Int32BlockSink sink = [&](int64_t row, int64_t col, int64_t block_rows, int64_t cols,
                                  const int32_t* block, int64_t ld) {
    epilogue_.apply_block(block, ld, row, col, block_rows, cols, row_sums, out, rows);
  };
  return fallback_.run(
      [&] {
        NPUFLOW_RETURN_IF_ERROR(
            gemm_int8_real_rows(*device_, device_a, a_type, m, *packed_, sink, context));
        counters_.device_calls++;
        if (logger_.enabled(LogLevel::kTrace)) {
          logger_.trace(str_cat("npu_qdq_device ", name_, " m=", m, " k=", spec.k, " n=", spec.n,
                                " device=", device_->name()));
        }
        return Status::ok();
      },
      host_loop, counters_.fallback_calls, logger_,
      [&](const Status& status) {
        return str_cat("npu_qdq_fallback ", name_, " m=", m, " k=", spec.k, " n=", spec.n, ": ",
                       status.to_string(), "; running on the host loop (reported once per node)");
      });
}

Status QdqMatMul::run_from_dequantized(const float* a, ElementType quantized_type, int64_t m,
                                       void* out, const ExecContext& context,
                                       const RowQuantization* rows) const {
  const QdqGemmSpec& spec = epilogue_.spec();
  if (spec.x_per_row &&
      (rows == nullptr || rows->scales == nullptr || rows->zero_points == nullptr))
    return internal_error(str_cat(name_, ": a per-row group ran without its row scales"));
  const int64_t count = m * spec.k;
  uint8_t* q = sized(thread_scratch().activations, static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const float value = a[i];
    if (!std::isfinite(value)) {
      return invalid_argument(str_cat(name_, ": activation ", i, " is not finite"));
    }
    const int64_t row = i / spec.k;
    const float scale = spec.x_per_row ? rows->scales[row] : spec.x_scale;
    const int32_t zero_point = spec.x_per_row ? rows->zero_points[row] : spec.x_zero_point;
    // A zero scale made every value 0: any integer dequantizes to it, the zero point is one.
    const int32_t integer = scale == 0.0f
                                ? zero_point
                                : static_cast<int32_t>(std::nearbyint(value / scale)) + zero_point;
    q[i] = static_cast<uint8_t>(integer);  // two's complement keeps int8 values intact
  }
  return run(q, quantized_type, m, out, context, rows);
}

}  // namespace npuflow
