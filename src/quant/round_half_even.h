// Rounding to the nearest integer, half to even, for |v| <= 2^22 under the default rounding mode:
// v + 1.5 * 2^23 has an ulp of 1 and an even constant, so the sum rounds v as nearbyint does (and
// as ggml's nearest_int does), and the difference is exact. Unlike std::nearbyint, which is a
// library call unless SSE4.1 is the baseline, compilers vectorize it.
#pragma once

namespace npuflow {

inline constexpr float kRoundHalfEvenConstant = 12582912.0f;  // 1.5 * 2^23

inline float round_half_even(float v) {
  return (v + kRoundHalfEvenConstant) - kRoundHalfEvenConstant;
}

}  // namespace npuflow
