// The QDQ epilogue against a brute-force reference written independently here: ties, saturation
// and the zero-point algebra.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "quant/qdq_epilogue.h"

namespace npuflow {
namespace {

// Round half to even on a long double, independently of nearbyint.
int64_t round_half_even(long double v) {
  long double floor_v = std::floor(v);
  long double diff = v - floor_v;
  int64_t f = static_cast<int64_t>(floor_v);
  if (diff < 0.5L) return f;
  if (diff > 0.5L) return f + 1;
  return (f % 2 == 0) ? f : f + 1;
}

struct Case {
  int64_t m, k, n;
  int32_t zp_x;
  std::vector<int32_t> zp_w;
  std::vector<float> s_w;
  float s_x, s_y;
  int32_t zp_y;
  ElementType out_type;
};

void check_against_brute_force(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> i8(-128, 127);
  std::vector<int8_t> a(c.m * c.k), w(c.k * c.n);
  for (auto& v : a) v = static_cast<int8_t>(i8(rng));
  for (auto& v : w) v = static_cast<int8_t>(i8(rng));
  std::vector<int32_t> acc(c.m * c.n, 0);
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j)
      for (int64_t kk = 0; kk < c.k; ++kk) acc[i * c.n + j] += a[i * c.k + kk] * w[kk * c.n + j];

  QdqGemmSpec spec;
  spec.k = c.k;
  spec.n = c.n;
  spec.x_scale = c.s_x;
  spec.x_zero_point = c.zp_x;
  spec.w_scales = c.s_w;
  spec.w_zero_points = c.zp_w;
  spec.output = QuantizedOutput{c.s_y, c.zp_y, c.out_type};
  QdqEpilogue epilogue(spec, w.data());
  std::vector<int64_t> row_sums(c.m);
  epilogue.compute_row_sums(a.data(), ElementType::kInt8, c.m, row_sums.data());
  std::vector<int8_t> out(c.m * c.n);
  epilogue.apply(acc.data(), row_sums.data(), c.m, out.data());

  const int lo = c.out_type == ElementType::kUInt8 ? 0 : -128;
  const int hi = c.out_type == ElementType::kUInt8 ? 255 : 127;
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      const int64_t zw = c.zp_w.size() == 1 ? c.zp_w[0] : c.zp_w[j];
      const float sw = c.s_w.size() == 1 ? c.s_w[0] : c.s_w[j];
      int64_t exact = 0;
      for (int64_t kk = 0; kk < c.k; ++kk) {
        exact += (int64_t{a[i * c.k + kk]} - c.zp_x) * (int64_t{w[kk * c.n + j]} - zw);
      }
      const long double scaled =
          static_cast<long double>(exact) * c.s_x * sw / static_cast<long double>(c.s_y);
      int64_t expected = round_half_even(scaled) + c.zp_y;
      expected = std::clamp<int64_t>(expected, lo, hi);
      const int got = c.out_type == ElementType::kUInt8 ? static_cast<uint8_t>(out[i * c.n + j])
                                                        : out[i * c.n + j];
      ASSERT_EQ(got, expected) << "row " << i << " col " << j << " exact " << exact;
    }
  }
}

TEST(QdqEpilogue, SymmetricPerTensorMatchesBruteForce) {
  check_against_brute_force({7, 64, 24, 0, {0}, {0.02f}, 0.05f, 0.9f, 0, ElementType::kInt8}, 1);
}

TEST(QdqEpilogue, AsymmetricZeroPointsMatchBruteForce) {
  // The zero points the ONNX pack design note gates on: zp_x=-40, zp_w=-25, zp_y=-7.
  check_against_brute_force({9, 96, 40, -40, {-25}, {0.01f}, 0.03f, 2.5f, -7, ElementType::kInt8},
                            2);
}

TEST(QdqEpilogue, PerColumnScalesAndZeroPointsMatchBruteForce) {
  Case c{5,
         48,
         6,
         13,
         {-3, 0, 7, -25, 1, 100},
         {0.01f, 0.02f, 0.005f, 0.03f, 0.011f, 0.002f},
         0.04f,
         1.3f,
         5,
         ElementType::kUInt8};
  check_against_brute_force(c, 3);
}

TEST(QdqEpilogue, TiesRoundHalfToEvenBeforeTheZeroPoint) {
  // multiplier 0.5: acc' = 1, 3, 5, -1, -3 gives 0.5, 1.5, 2.5, -0.5, -1.5.
  QdqGemmSpec spec;
  spec.k = 1;
  spec.n = 5;
  spec.x_scale = 0.5f;
  spec.w_scales = {1.0f};
  spec.w_zero_points = {0};
  spec.output = QuantizedOutput{1.0f, 0, ElementType::kInt8};
  const int8_t weight[5] = {1, 1, 1, 1, 1};
  QdqEpilogue epilogue(spec, weight);
  const int32_t acc[5] = {1, 3, 5, -1, -3};
  int8_t out[5];
  epilogue.apply(acc, nullptr, 1, out);
  EXPECT_EQ(out[0], 0);
  EXPECT_EQ(out[1], 2);
  EXPECT_EQ(out[2], 2);
  EXPECT_EQ(out[3], 0);
  EXPECT_EQ(out[4], -2);

  // With zp_y = 1 the zero point is added after rounding: 0.5 -> 0 + 1 = 1, not rne(1.5) = 2.
  spec.output->zero_point = 1;
  QdqEpilogue shifted(spec, weight);
  shifted.apply(acc, nullptr, 1, out);
  EXPECT_EQ(out[0], 1);
  EXPECT_EQ(out[1], 3);
  EXPECT_EQ(out[2], 3);
}

TEST(QdqEpilogue, SaturatesToTheOutputRange) {
  EXPECT_EQ(requantize_value(1e9, 0, ElementType::kInt8), 127);
  EXPECT_EQ(requantize_value(-1e9, 0, ElementType::kInt8), -128);
  EXPECT_EQ(requantize_value(126.6, 3, ElementType::kInt8), 127);
  EXPECT_EQ(requantize_value(-3.0, 2, ElementType::kUInt8), 0);
  EXPECT_EQ(requantize_value(300.0, 0, ElementType::kUInt8), 255);
  EXPECT_EQ(requantize_value(254.5, 0, ElementType::kUInt8), 254);
}

TEST(QdqEpilogue, ColumnSumsOnlyWhenActivationZeroPointIsNonZero) {
  QdqGemmSpec spec;
  spec.k = 2;
  spec.n = 2;
  spec.w_scales = {1.0f};
  spec.w_zero_points = {0};
  const int8_t weight[4] = {1, 2, 3, 4};
  EXPECT_FALSE(QdqEpilogue(spec, weight).has_column_sums());
  EXPECT_FALSE(QdqEpilogue(spec, weight).needs_row_sums());
  spec.x_zero_point = 3;
  spec.w_zero_points = {1};
  EXPECT_TRUE(QdqEpilogue(spec, weight).has_column_sums());
  EXPECT_TRUE(QdqEpilogue(spec, weight).needs_row_sums());
}

TEST(QdqEpilogue, FloatOutputIsTheScaledExactSum) {
  QdqGemmSpec spec;
  spec.k = 2;
  spec.n = 1;
  spec.x_scale = 0.25f;
  spec.x_zero_point = 1;
  spec.w_scales = {0.5f};
  spec.w_zero_points = {2};
  const int8_t weight[2] = {4, -2};  // (w - 2) = {2, -4}
  QdqEpilogue epilogue(spec, weight);
  const int8_t a[2] = {3, 5};  // (a - 1) = {2, 4}
  const int32_t acc[1] = {3 * 4 + 5 * -2};
  int64_t row_sum = 0;
  epilogue.compute_row_sums(a, ElementType::kInt8, 1, &row_sum);
  float out = 0;
  epilogue.apply(acc, &row_sum, 1, &out);
  EXPECT_FLOAT_EQ(out, (2 * 2 + 4 * -4) * 0.25f * 0.5f);
}

}  // namespace
}  // namespace npuflow
