// SAM's window partition as the grid matcher proves it: IndexTensor's constant padding, and
// GridTiling's element maps against SAM's own definition (window_partition / window_unpartition:
// pad, view [B, H/w, w, W/w, w, C], permute, view, and back with a crop) written in index ops.
#include <gtest/gtest.h>

#include <tuple>

#include "graph/encoder/grid_tiling.h"
#include "graph/encoder/index_tensor.h"

namespace npuflow {
namespace {

using encoder::GridTiling;
using encoder::IndexTensor;

TEST(EncoderIndexTensor, PadMarksNewEntriesAndNegativeAmountsCrop) {
  IndexTensor t = IndexTensor::iota({2, 3});
  ASSERT_TRUE(t.pad({0, 1}, {1, 0}));
  EXPECT_EQ(t.shape, (std::vector<int64_t>{3, 4}));
  const int32_t p = IndexTensor::kPadded;
  EXPECT_EQ(t.data, (std::vector<int32_t>{p, 0, 1, 2, p, 3, 4, 5, p, p, p, p}));
  ASSERT_TRUE(t.pad({0, -1}, {-1, 0}));
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t.data, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_FALSE(t.pad({0, -3}, {0, 0}));  // nothing left
  EXPECT_FALSE(t.pad({0}, {0}));         // a rank that is not the tensor's
}

// (batch, height, width, channels, window)
class GridTilingTest
    : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>> {};

TEST_P(GridTilingTest, MatchesSamsWindowPartitionAndUnpartition) {
  const auto [batch, height, width, channels, window] = GetParam();
  const GridTiling t = GridTiling::of(batch, height, width, channels, window);
  const int64_t w = window > 0 ? window : 0;
  const int64_t padded_h = w > 0 ? (height + w - 1) / w * w : height;
  const int64_t padded_w = w > 0 ? (width + w - 1) / w * w : width;
  const int64_t rows = w > 0 ? w : height, cols = w > 0 ? w : width;
  const int64_t down = padded_h / rows, across = padded_w / cols;
  EXPECT_EQ(t.windows(), batch * down * across);

  IndexTensor part = IndexTensor::iota({batch, height, width, channels});
  ASSERT_TRUE(part.pad({0, 0, 0, 0}, {0, padded_h - height, padded_w - width, 0}));
  ASSERT_TRUE(part.reshape({batch, down, rows, across, cols, channels}));
  ASSERT_TRUE(part.transpose({0, 1, 3, 2, 4, 5}));
  ASSERT_TRUE(part.reshape({-1, rows, cols, channels}));
  EXPECT_EQ(part.data, t.partitioned());

  IndexTensor back = IndexTensor::iota({t.windows(), rows, cols, channels});
  ASSERT_TRUE(back.reshape({batch, down, across, rows, cols, channels}));
  ASSERT_TRUE(back.transpose({0, 1, 3, 2, 4, 5}));
  ASSERT_TRUE(back.reshape({batch, padded_h, padded_w, channels}));
  ASSERT_TRUE(back.select(1, 0, height, false));
  ASSERT_TRUE(back.select(2, 0, width, false));
  EXPECT_EQ(back.data, t.unpartitioned());
}

INSTANTIATE_TEST_SUITE_P(Grids, GridTilingTest,
                         ::testing::Values(std::make_tuple(1, 8, 8, 3, 4),    // divides
                                           std::make_tuple(2, 5, 7, 2, 3),    // padded, 2 images
                                           std::make_tuple(1, 3, 3, 1, 5),    // window past grid
                                           std::make_tuple(1, 6, 4, 2, 0),    // whole grid
                                           std::make_tuple(1, 64, 64, 1, 14)  // SAM ViT-B
                                           ));

TEST(GridTiling, AWrongWindowSizeDoesNotMatchTheMaps) {
  // What lets the matcher search window sizes: each size moves the tokens differently.
  const GridTiling four = GridTiling::of(1, 8, 8, 1, 4), two = GridTiling::of(1, 8, 8, 1, 2);
  EXPECT_NE(four.partitioned(), two.partitioned());
  EXPECT_NE(four.unpartitioned(), GridTiling::of(1, 8, 8, 1, 0).unpartitioned());
}

}  // namespace
}  // namespace npuflow
