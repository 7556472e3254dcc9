#include "quant/block_quantization.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "core/fp16.h"
#include "quant/round_half_even.h"

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
    q[i] = static_cast<int8_t>(round_half_even(x[i] * inverse));
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

// One Q8_K block of 256 values; scales and sums (when wanted) get one entry per `group` values.
bool quantize_k_block(const float* x, int8_t* q, float* scales, float* sums, int64_t group) {
  float max = 0.0f, amax = 0.0f;
  for (int64_t i = 0; i < kQ8KBlockValues; ++i) {
    if (!std::isfinite(x[i])) return false;
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  const int64_t groups = kQ8KBlockValues / group;
  if (amax == 0.0f) {
    std::fill(q, q + kQ8KBlockValues, int8_t{0});
    std::fill(scales, scales + groups, 0.0f);
    if (sums != nullptr) std::fill(sums, sums + groups, 0.0f);
    return true;
  }
  const float iscale = -127.0f / max;
  for (int64_t i = 0; i < kQ8KBlockValues; ++i) {
    q[i] = static_cast<int8_t>(std::min(127.0f, round_half_even(iscale * x[i])));
  }
  const float d = 1.0f / iscale;
  for (int64_t g = 0; g < groups; ++g) {
    scales[g] = d;
    if (sums == nullptr) continue;
    int32_t total = 0;
    for (int64_t i = g * group; i < (g + 1) * group; ++i) total += q[i];
    sums[g] = d * static_cast<float>(total);
  }
  return true;
}

// Rows of x in parallel tasks; false as soon as a block refuses.
template <typename Row>
bool for_each_row(int64_t m, const ExecContext& context, Row row_body) {
  std::atomic<bool> finite{true};
  constexpr int64_t kRowsPerTask = 16;
  context.run(static_cast<size_t>((m + kRowsPerTask - 1) / kRowsPerTask), [&](size_t task) {
    const int64_t first = static_cast<int64_t>(task) * kRowsPerTask;
    for (int64_t row = first; row < std::min(m, first + kRowsPerTask); ++row) {
      if (!row_body(row)) {
        finite.store(false, std::memory_order_relaxed);
        return;
      }
    }
  });
  return finite.load();
}

}  // namespace

bool quantize_rows_q8_k(const float* x, int64_t m, int64_t k, int8_t* q, float* scales, float* sums,
                        const ExecContext& context, int64_t group) {
  const int64_t groups = k / group;
  return for_each_row(m, context, [&](int64_t row) {
    for (int64_t b = 0; b < k; b += kQ8KBlockValues) {
      const int64_t at = row * groups + b / group;
      if (!quantize_k_block(x + row * k + b, q + row * k + b, scales + at,
                            sums != nullptr ? sums + at : nullptr, group)) {
        return false;
      }
    }
    return true;
  });
}

bool quantize_rows_q8_blocks(const float* x, int64_t m, int64_t k, int8_t* q, float* scales,
                             const ExecContext& context, float* sums) {
  const int64_t blocks = k / kQ8BlockValues;
  return for_each_row(m, context, [&](int64_t row) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t at = row * k + b * kQ8BlockValues;
      float* sum = sums != nullptr ? sums + row * blocks + b : nullptr;
      if (!quantize_block(x + at, q + at, scales + row * blocks + b, sum)) return false;
    }
    return true;
  });
}

}  // namespace npuflow
