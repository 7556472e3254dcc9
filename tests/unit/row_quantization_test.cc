// Per-row activation quantization expanded to one scale and zero point per GEMM row.
#include "quant/row_quantization.h"

#include <gtest/gtest.h>

#include <limits>

namespace npuflow {
namespace {

TEST(RowQuantization, TheIndexAlongTheAxisAdvancesEveryInnerBlockOfRows) {
  // [B=2, T=3, K]: along axis 0 each batch's scale covers its 3 rows; along axis 1 the token
  // index repeats for every batch.
  RowQuantizationBuffers out;
  ASSERT_TRUE(expand_row_quantization({2, 3, 8}, 0, {1.0f, 2.0f}, {5, 6}, out).is_ok());
  EXPECT_EQ(out.scales, (std::vector<float>{1, 1, 1, 2, 2, 2}));
  EXPECT_EQ(out.zero_points, (std::vector<int32_t>{5, 5, 5, 6, 6, 6}));
  ASSERT_TRUE(expand_row_quantization({2, 3, 8}, 1, {1.0f, 2.0f, 4.0f}, {0}, out).is_ok());
  EXPECT_EQ(out.scales, (std::vector<float>{1, 2, 4, 1, 2, 4}));
  EXPECT_EQ(out.zero_points, (std::vector<int32_t>(6, 0)));
}

TEST(RowQuantization, CountsAxesAndScalesAreChecked) {
  RowQuantizationBuffers out;
  EXPECT_FALSE(expand_row_quantization({4, 8}, 1, {1.0f}, {0}, out).is_ok());  // along K
  EXPECT_FALSE(expand_row_quantization({8}, 0, {1.0f}, {0}, out).is_ok());
  EXPECT_FALSE(expand_row_quantization({4, 8}, 0, {1.0f, 2.0f}, {0}, out).is_ok());
  EXPECT_FALSE(expand_row_quantization({4, 8}, 0, {1.0f}, {0, 0}, out).is_ok());
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(expand_row_quantization({2, 8}, 0, {1.0f, inf}, {0}, out).is_ok());
  // A zero scale is an all-zero row's: kept.
  ASSERT_TRUE(expand_row_quantization({2, 8}, 0, {0.0f, 0.5f}, {0}, out).is_ok());
  EXPECT_EQ(out.scales, (std::vector<float>{0.0f, 0.5f}));
}

}  // namespace
}  // namespace npuflow
