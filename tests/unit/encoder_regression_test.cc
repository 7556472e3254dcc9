// Regressions found by the encoder unit tests: each was claimed or mis-shaped before its fix.
#include <gtest/gtest.h>

#include <algorithm>

#include "encoder_test_graph.h"

namespace npuflow::encoder_test {
namespace {

TEST(EncoderRegression, StaticShapeOfABroadcastAddWithTheBiasFirst) {
  TestGraph g;
  const ValueId x = g.input({1, 6, 8});
  const ValueId y = g.op("Add", {g.weight({8}), x}, {});
  g.forget_shape(y);
  encoder::CanonicalGraph c(g.graph);
  auto s = c.static_shape(y);
  ASSERT_TRUE(s);
  EXPECT_EQ(*s, (std::vector<int64_t>{1, 6, 8}));
  const ValueId shape = g.op("Shape", {y}, {3}, {}, ElementType::kInt64);
  encoder::CanonicalGraph c2(g.graph);
  EXPECT_EQ(c2.shape_values(shape), (std::vector<int64_t>{1, 6, 8}));
}

TEST(EncoderRegression, TrainingModeDropoutOnProbabilities) {
  // Build the accepted attention, then put a Dropout in training mode on P.
  TestGraph g;
  const ValueId x = g.input({1, 6, 8});
  AttentionSpec s;
  s.nan_guard = true;  // Where reads P: we rewire the Where output through Dropout
  auto built = attention(g, x, s);
  // Find the Where and make P@V read Dropout(Where, 0.5, true).
  NodeId where = kNoNode, pv = kNoNode;
  for (size_t i = 0; i < g.graph.nodes.size(); ++i) {
    if (g.graph.nodes[i].op_type == "Where") where = static_cast<NodeId>(i);
  }
  ASSERT_NE(where, kNoNode);
  const ValueId w_out = g.graph.nodes[where].outputs[0];
  pv = g.graph.value(w_out).consumers[0];
  const ValueId dropped = g.value({1, 2, 6, 6});
  const ValueId ratio = g.scalar(0.5f);
  const ValueId training = g.constant<uint8_t>({}, ElementType::kUInt8, {1});
  // Dropout appended at the end of the node list; rewire pv's input.
  NodeInfo info;
  info.name = "dropout";
  info.op_type = "Dropout";
  info.inputs = {w_out, ratio, training};
  info.outputs = {dropped};
  const NodeId d = g.graph.add_node(info);
  (void)d;
  g.graph.nodes[pv].inputs[0] = dropped;
  auto& cons = g.graph.values[w_out].consumers;
  cons.erase(std::find(cons.begin(), cons.end(), pv));
  g.graph.values[dropped].consumers.push_back(pv);
  const EncoderMatcherOptions options;
  encoder::Matcher m(g.graph, options);
  encoder::Used used;
  auto o = m.linear(built.out, used);
  ASSERT_TRUE(o);
  encoder::Fail why;
  auto att = m.attention(*o, 6, used, why);
  EXPECT_FALSE(att) << "claimed a Dropout in training mode";
}

TEST(EncoderRegression, OrtFlattenThatRegroupsRows) {
  TestGraph g;
  const ValueId x = g.input({1, 6, 8});
  const ValueId flat = g.op("Reshape", {x, g.i64s({-1, 4})}, {12, 4});  // rows of 4, not 8
  const ValueId mm = g.op("Gemm", {flat, g.weight({4, 8}), g.weight({8})}, {12, 8});
  const ValueId y = g.op("Reshape", {mm, g.i64s({1, 12, 8})}, {1, 12, 8});
  const EncoderMatcherOptions options;
  encoder::Matcher m(g.graph, options);
  encoder::Used used;
  auto lin = m.linear(y, used);
  EXPECT_FALSE(lin) << "claimed x [1,6,8] as the input of a K=4 linear (k=" << (lin ? lin->k : 0)
                    << ")";
}

}  // namespace
}  // namespace npuflow::encoder_test
