// fp16 conversion: special values by their bit patterns, round-to-nearest-even ties, and (where
// a compiler half type exists) agreement with the compiler's own conversion.
#include "core/fp16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace npuflow {
namespace {

float from_bits(uint32_t bits) {
  return std::bit_cast<float>(bits);
}

TEST(Fp16, SpecialValuesConvertToTheirBitPatterns) {
  EXPECT_EQ(float_to_half_bits(0.0f), 0x0000);
  EXPECT_EQ(float_to_half_bits(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half_bits(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half_bits(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half_bits(65504.0f), 0x7bff);  // largest finite
  EXPECT_EQ(float_to_half_bits(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(float_to_half_bits(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(float_to_half_bits(6.103515625e-05f), 0x0400);         // smallest normal 2^-14
  EXPECT_EQ(float_to_half_bits(5.9604644775390625e-08f), 0x0001);  // smallest subnormal 2^-24
  EXPECT_EQ(float_to_half_bits(6.0975551605224609e-05f), 0x03ff);  // largest subnormal
  const uint16_t nan = float_to_half_bits(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  EXPECT_TRUE(std::isnan(half_bits_to_float(0x7e00)));
  EXPECT_TRUE(std::isnan(half_bits_to_float(0xfc01)));
  EXPECT_EQ(half_bits_to_float(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(half_bits_to_float(0x0001), 5.9604644775390625e-08f);
  EXPECT_EQ(half_bits_to_float(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::signbit(half_bits_to_float(0x8000)));
}

TEST(Fp16, RoundsToNearestEvenAtTies) {
  // 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: ties to the even mantissa (1.0).
  EXPECT_EQ(float_to_half_bits(1.0f + 0x1p-11f), 0x3c00);
  // 1 + 3*2^-11 lies halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even).
  EXPECT_EQ(float_to_half_bits(1.0f + 3 * 0x1p-11f), 0x3c02);
  // Just above a tie rounds up.
  EXPECT_EQ(float_to_half_bits(std::nextafter(1.0f + 0x1p-11f, 2.0f)), 0x3c01);
  // Overflow: 65519.99 rounds to 65504, 65520 (the tie) to infinity.
  EXPECT_EQ(float_to_half_bits(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(float_to_half_bits(65520.0f), 0x7c00);
  // Underflow: 2^-25 is the tie between 0 and 2^-24 and goes to zero; above it, 2^-24.
  EXPECT_EQ(float_to_half_bits(0x1p-25f), 0x0000);
  EXPECT_EQ(float_to_half_bits(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(float_to_half_bits(-0x1p-26f), 0x8000);
  // 3 * 2^-25 is the tie between subnormals 1 and 2: goes to 2 (even).
  EXPECT_EQ(float_to_half_bits(3 * 0x1p-25f), 0x0002);
  // A subnormal that carries into the smallest normal.
  EXPECT_EQ(float_to_half_bits(std::nextafter(6.103515625e-05f, 0.0f)), 0x0400);
}

TEST(Fp16, EveryHalfRoundTripsThroughFloat) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = half_bits_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_half_bits(f), h) << std::hex << h;
  }
}

// The compiler's own half type, whose conversions the hardware (or its emulation) rounds to
// nearest even: ACLE's __fp16 on aarch64 (GCC 12 has no _Float16 in C++ there), else _Float16.
#if defined(__aarch64__)
using CompilerHalf = __fp16;
#define NPUFLOW_HAVE_COMPILER_HALF 1
#elif defined(__FLT16_MAX__)
using CompilerHalf = _Float16;
#define NPUFLOW_HAVE_COMPILER_HALF 1
#endif

#if defined(NPUFLOW_HAVE_COMPILER_HALF)
TEST(Fp16, AgreesWithTheCompilersFloat16) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const CompilerHalf ref = std::bit_cast<CompilerHalf>(static_cast<uint16_t>(h));
    const float f = half_bits_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(std::bit_cast<uint32_t>(f), std::bit_cast<uint32_t>(static_cast<float>(ref)))
        << std::hex << h;
  }
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 2000000; ++i) {
    uint32_t bits = any(rng);
    // Bias half of the draws into fp16's range, where the rounding is interesting.
    if (i & 1) bits = (bits & 0x807fffffu) | ((0x66u + (bits >> 23) % 0x22u) << 23);
    const float f = from_bits(bits);
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_half_bits(f), std::bit_cast<uint16_t>(static_cast<CompilerHalf>(f)))
        << std::hex << bits;
  }
}
#endif

}  // namespace
}  // namespace npuflow
