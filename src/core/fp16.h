// IEEE 754 binary16 (fp16) <-> binary32 conversion, bit-exact, round to nearest even. Written
// here rather than relying on _Float16 so the core builds on every compiler; the unit test checks
// it against the compiler's _Float16 where one exists, and over the special values everywhere.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace npuflow {

inline constexpr uint16_t kHalfMinusInfinity = 0xfc00;

// float -> fp16 bits, round to nearest, ties to even. Overflow gives infinity, NaN stays NaN
// (quiet, the top payload bits kept), values below half the smallest subnormal give signed zero.
inline uint16_t float_to_half_bits(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // infinity or NaN
    if (magnitude == 0x7f800000u) return sign | 0x7c00u;
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  // 65520 = 65504 + half an ulp: the tie rounds to the even neighbour, 2^16, i.e. infinity.
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u;
  if (magnitude >= 0x38800000u) {  // normal in fp16 (>= 2^-14)
    // Round the 13 dropped mantissa bits to nearest even; a carry moves into the exponent.
    const uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
  }
  // Subnormal or zero in fp16: the value in units of 2^-24. Scaling by 2^24 is exact in float and
  // nearbyint rounds half to even under the default rounding mode; 1024 is the smallest normal.
  const float units = std::fabs(value) * 16777216.0f;
  return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(units)));
}

inline float half_bits_to_float(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu;
  const uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0x1fu) {  // infinity or NaN (payload kept)
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  }
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// The float nearest to value that fp16 can hold (round to nearest even).
inline float round_to_half(float value) {
  return half_bits_to_float(float_to_half_bits(value));
}

// Rounds `count` floats to fp16 bits; false when a finite value became infinity (an NPU would
// compute with infinity where the reference has a number).
inline bool floats_to_half_in_range(const float* x, size_t count, uint16_t* half) {
  bool in_range = true;
  for (size_t i = 0; i < count; ++i) {
    half[i] = float_to_half_bits(x[i]);
    in_range = in_range && !(std::isfinite(x[i]) && (half[i] & 0x7fffu) == 0x7c00u);
  }
  return in_range;
}

}  // namespace npuflow
