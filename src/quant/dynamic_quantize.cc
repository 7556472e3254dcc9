#include "quant/dynamic_quantize.h"

#include <algorithm>
#include <cmath>

namespace npuflow {

DynamicQuantization dynamic_quantization_params(const float* x, int64_t count) {
  float lo = 0.0f;
  float hi = 0.0f;
  for (int64_t i = 0; i < count; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  DynamicQuantization params;
  params.scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
  const float initial_zero_point = 0.0f - lo / params.scale;
  // nearbyint rounds half to even under the default rounding mode.
  params.zero_point =
      static_cast<uint8_t>(std::nearbyint(std::clamp(initial_zero_point, 0.0f, 255.0f)));
  return params;
}

void quantize_uint8(const float* x, int64_t count, DynamicQuantization params, uint8_t* out) {
  const float lower = -static_cast<float>(params.zero_point);
  const float upper = 255.0f - static_cast<float>(params.zero_point);
  const int32_t zero_point = params.zero_point;
  for (int64_t i = 0; i < count; ++i) {
    float v = x[i] / params.scale;
    v = v > lower ? v : lower;  // a NaN compares false and takes the lower bound
    v = v < upper ? v : upper;
    out[i] = static_cast<uint8_t>(static_cast<int32_t>(std::nearbyint(v)) + zero_point);
  }
}

}  // namespace npuflow
