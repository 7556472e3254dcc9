#include "quant/symmetric_quantization.h"

#include <algorithm>
#include <cmath>

namespace npuflow {
namespace {

constexpr float kLevels = 127.0f;

int8_t quantize(float x, float scale) {
  const float q = std::nearbyint(x / scale);  // the default rounding mode: half to even
  return static_cast<int8_t>(std::clamp(q, -kLevels, kLevels));
}

// A maximum so small that amax / 127 underflows to 0 quantizes to zeros with scale 1, as an
// all-zero one does (0 / 0 would be NaN, which no int8 holds).
float scale_of(float amax) {
  const float scale = amax / kLevels;
  return scale > 0.0f ? scale : 1.0f;
}

}  // namespace

SymmetricColumns quantize_columns_symmetric(const float* w, int64_t k, int64_t n) {
  SymmetricColumns out;
  std::vector<float> amax(static_cast<size_t>(n), 0.0f);
  for (int64_t r = 0; r < k; ++r) {
    for (int64_t c = 0; c < n; ++c) amax[c] = std::max(amax[c], std::fabs(w[r * n + c]));
  }
  out.scales.resize(static_cast<size_t>(n));
  for (int64_t c = 0; c < n; ++c) out.scales[c] = scale_of(amax[c]);
  out.values.resize(static_cast<size_t>(k * n));
  for (int64_t r = 0; r < k; ++r) {
    for (int64_t c = 0; c < n; ++c) out.values[r * n + c] = quantize(w[r * n + c], out.scales[c]);
  }
  return out;
}

bool quantize_row_symmetric(const float* x, int64_t k, int8_t* q, float* scale) {
  float amax = 0.0f;
  for (int64_t i = 0; i < k; ++i) {
    if (!std::isfinite(x[i])) return false;
    amax = std::max(amax, std::fabs(x[i]));
  }
  *scale = scale_of(amax);
  for (int64_t i = 0; i < k; ++i) q[i] = quantize(x[i], *scale);
  return true;
}

}  // namespace npuflow
