// Per-row activation quantization of a QDQ group for one run: the DequantizeLinear's scales and
// zero points along a leading axis of the activation (per-token quantization), expanded to one
// of each per GEMM row.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "quant/qdq_epilogue.h"

namespace npuflow {

struct RowQuantizationBuffers {
  std::vector<float> scales;
  std::vector<int32_t> zero_points;
  RowQuantization view() const { return {scales.data(), zero_points.data()}; }
};

// `dims`: the activation's shape (its rows are every dimension but the last); `axis`: the one the
// parameters run along. Each of `scales` and `zero_points` holds 1 value (per tensor) or
// dims[axis]; anything else is the model's error, as the CPU EP reports it.
Status expand_row_quantization(const std::vector<int64_t>& dims, int64_t axis,
                               const std::vector<float>& scales,
                               const std::vector<int32_t>& zero_points,
                               RowQuantizationBuffers& out);

}  // namespace npuflow
