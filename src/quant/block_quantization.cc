#include "quant/block_quantization.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "core/fp16.h"

namespace npuflow {
namespace {

bool quantize_block(const float* x, int8_t* q, float* scale, float* sum) {
  float amax = 0.0f;
  for (int64_t i = 0; i < kQ8BlockValues; ++i) {
    if (!std::isfinite(x[i])) return false;
    amax = std::max(amax, std::fabs(x[i]));
  }
  const float d = amax / 127.0f;
  // |x * inverse| <= 127 (to within an ulp) by construction.
#if defined(__x86_64__)
  const float inverse = amax != 0.0f ? 127.0f / amax : 0.0f;
#else
  const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
#endif
  for (int64_t i = 0; i < kQ8BlockValues; ++i) {
#if defined(__x86_64__) || defined(__aarch64__)
    q[i] = static_cast<int8_t>(std::nearbyint(x[i] * inverse));  // ties to even
#else
    q[i] = static_cast<int8_t>(std::roundf(x[i] * inverse));  // ties away from zero
#endif
  }
  *scale = half_bits_to_float(float_to_half_bits(d));
  if (sum != nullptr) {
    int32_t total = 0;
    for (int64_t i = 0; i < kQ8BlockValues; ++i) total += q[i];
    *sum = half_bits_to_float(float_to_half_bits(d * static_cast<float>(total)));
  }
  return true;
}

}  // namespace

bool quantize_rows_q8_blocks(const float* x, int64_t m, int64_t k, int8_t* q, float* scales,
                             const ExecContext& context, float* sums) {
  const int64_t blocks = k / kQ8BlockValues;
  std::atomic<bool> finite{true};
  constexpr int64_t kRowsPerTask = 16;
  context.run(static_cast<size_t>((m + kRowsPerTask - 1) / kRowsPerTask), [&](size_t task) {
    const int64_t first = static_cast<int64_t>(task) * kRowsPerTask;
    for (int64_t row = first; row < std::min(m, first + kRowsPerTask); ++row) {
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t at = row * k + b * kQ8BlockValues;
        float* sum = sums != nullptr ? sums + row * blocks + b : nullptr;
        if (!quantize_block(x + at, q + at, scales + row * blocks + b, sum)) {
          finite.store(false, std::memory_order_relaxed);
          return;
        }
      }
    }
  });
  return finite.load();
}

}  // namespace npuflow
