// Symmetric int8 quantization for the opt-in float MatMul claim (NPUFLOW_FLOAT_MATMUL=int8, as
// seed 004 describes it): a weight once per output column, an activation per row at run time,
// each with scale amax / 127 and values round-half-to-even(x / scale) in [-127, 127]. Lossy by
// design; an all-zero column or row gets scale 1 and zeros.
#pragma once

#include <cstdint>
#include <vector>

namespace npuflow {

struct SymmetricColumns {
  std::vector<int8_t> values;  // K x N row-major
  std::vector<float> scales;   // N
};

// w: K x N row-major and finite (the matcher refuses other weights).
SymmetricColumns quantize_columns_symmetric(const float* w, int64_t k, int64_t n);

// One row of K values into q with its scale. False (q and scale untouched) when the row holds a
// NaN or an infinity, which no int8 value can carry.
bool quantize_row_symmetric(const float* x, int64_t k, int8_t* q, float* scale);

}  // namespace npuflow
