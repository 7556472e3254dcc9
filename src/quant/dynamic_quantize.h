// DynamicQuantizeLinear as ONNX defines it and ONNX Runtime computes it: uint8, the range
// [min(0, min x), max(0, max x)] mapped onto [0, 255], round half to even, saturate.
//
//   scale = (max - min) / 255            (1 when max == min: the all-zero input ONNX leaves open)
//   zero_point = saturate(round(0 - min / scale))
//   y = saturate(round(x / scale) + zero_point)
//
// Every step is one fp32 operation in the order written, so the result is the CPU EP's to the bit.
#pragma once

#include <cstdint>

#include "core/parallel.h"

namespace npuflow {

struct DynamicQuantization {
  float scale = 1.0f;
  uint8_t zero_point = 0;
};

// Both split `x` into chunks run on `context`; the result does not depend on how.
DynamicQuantization dynamic_quantization_params(const float* x, int64_t count,
                                                const ExecContext& context = {});

// x / scale is clamped to [-zp, 255 - zp] before rounding (a NaN takes the lower bound, as
// MLAS's max/min order gives it), then the zero point is added.
void quantize_uint8(const float* x, int64_t count, DynamicQuantization params, uint8_t* out,
                    const ExecContext& context = {});

}  // namespace npuflow
