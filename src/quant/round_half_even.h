// Rounding to the nearest integer, half to even, under the default rounding mode: v + 1.5 * 2^23
// (float, |v| <= 2^22) or v + 1.5 * 2^52 (double, |v| <= 2^51) has an ulp of 1 and an even
// constant, so the sum rounds v as nearbyint does (and as ggml's nearest_int does), and the
// difference is exact. Unlike std::nearbyint, which is a library call unless SSE4.1 is the
// baseline, compilers vectorize it.
#pragma once

namespace npuflow {

inline constexpr float kRoundHalfEvenConstant = 12582912.0f;                // 1.5 * 2^23
inline constexpr double kRoundHalfEvenConstantDouble = 6755399441055744.0;  // 1.5 * 2^52

inline float round_half_even(float v) {
  return (v + kRoundHalfEvenConstant) - kRoundHalfEvenConstant;
}

inline double round_half_even(double v) {
  return (v + kRoundHalfEvenConstantDouble) - kRoundHalfEvenConstantDouble;
}

}  // namespace npuflow
