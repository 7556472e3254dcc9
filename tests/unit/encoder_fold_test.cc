// Folding constant float subgraphs (a position embedding interpolated to its own grid): what
// folds, what it computes, and the Resize that changes the size, which must not fold.
#include <gtest/gtest.h>

#include "encoder_test_graph.h"

namespace npuflow::encoder_test {
namespace {

using encoder::Matcher;
using encoder::Used;

// pos = Concat(class row, Reshape(Transpose(Resize(Transpose(Reshape(table)))))) as
// TorchScript's DINOv2 export writes it, the table a g x g grid of d channels.
struct Interpolated {
  ValueId pos = kNoValue;
  std::vector<float> table, cls;
};

Interpolated interpolated(TestGraph& g, int64_t grid, int64_t out_grid, int64_t d) {
  Interpolated r;
  for (int64_t i = 0; i < grid * grid * d; ++i) r.table.push_back(0.25f * static_cast<float>(i));
  for (int64_t i = 0; i < d; ++i) r.cls.push_back(-1.0f - static_cast<float>(i));
  const ValueId table = g.floats({1, grid * grid, d}, r.table);
  const ValueId cls = g.floats({1, 1, d}, r.cls);
  const ValueId square = g.op("Reshape", {table, g.i64s({1, grid, grid, d})}, {1, grid, grid, d});
  const ValueId chw =
      g.op("Transpose", {square}, {1, d, grid, grid}, {{"perm", ints({0, 3, 1, 2})}});
  const ValueId resized =
      g.op("Resize", {chw, kNoValue, kNoValue, g.i64s({1, d, out_grid, out_grid})},
           {1, d, out_grid, out_grid},
           {{"mode", text("cubic")}, {"coordinate_transformation_mode", text("half_pixel")}});
  const ValueId hwc =
      g.op("Transpose", {resized}, {1, out_grid, out_grid, d}, {{"perm", ints({0, 2, 3, 1})}});
  const ValueId rows = g.op("Reshape", {hwc, g.i64s({1, -1, d})}, {1, out_grid * out_grid, d});
  r.pos = g.op("Concat", {cls, rows}, {1, 1 + out_grid * out_grid, d}, {{"axis", integer(1)}});
  return r;
}

TEST(EncoderFold, AnInterpolationToItsOwnGridFoldsToTheTable) {
  TestGraph g;
  const Interpolated built = interpolated(g, 3, 3, 4);
  const EncoderMatcherOptions options;
  Matcher m(g.graph, options);
  Used used;
  auto folded = m.fold(built.pos, used);
  ASSERT_TRUE(folded);
  EXPECT_EQ(folded->shape, (std::vector<int64_t>{1, 10, 4}));
  std::vector<float> want = built.cls;
  want.insert(want.end(), built.table.begin(), built.table.end());
  EXPECT_EQ(folded->data, want);
  EXPECT_EQ(used.size(), 6u);  // the Reshapes, Transposes, Resize and Concat join the claim
}

TEST(EncoderFold, AResizeToAnotherGridDoesNotFold) {
  TestGraph g;
  const Interpolated built = interpolated(g, 3, 4, 4);
  const EncoderMatcherOptions options;
  Matcher m(g.graph, options);
  Used used;
  EXPECT_FALSE(m.fold(built.pos, used));
}

TEST(EncoderFold, ARuntimeValueDoesNotFold) {
  TestGraph g;
  const ValueId x = g.input({1, 4, 8});
  const ValueId y = g.op("Add", {x, g.weight({1, 4, 8})}, {1, 4, 8});
  const EncoderMatcherOptions options;
  Matcher m(g.graph, options);
  Used used;
  EXPECT_FALSE(m.fold(y, used));
}

}  // namespace
}  // namespace npuflow::encoder_test
