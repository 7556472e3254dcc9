// The float reading of a QDQ graph (graph/quantized_view.h): constant DequantizeLinears become
// their dequantized values, activation Q -> DQ pairs are bypassed, and a claim takes the seen-
// through nodes along, or says which value it cannot.
#include "graph/quantized_view.h"

#include <gtest/gtest.h>

#include "encoder_test_graph.h"

namespace npuflow {
namespace {

using encoder_test::integer;
using encoder_test::TestGraph;

TEST(DequantizedView, AGraphWithoutQuantizationIsReadAsItIs) {
  TestGraph g;
  const ValueId x = g.input({2, 4});
  const ValueId y = g.op("Relu", {x}, {2, 4});
  g.output(y);
  const DequantizedView view(g.graph);
  EXPECT_FALSE(view.changed());
  EXPECT_EQ(&view.view(), &g.graph);
}

TEST(DequantizedView, AConstantDequantizeLinearBecomesItsValuesPerAxis) {
  TestGraph g;
  const ValueId x = g.input({1, 3});
  const ValueId w = g.constant<int8_t>({3, 2}, ElementType::kInt8, {-128, 127, 5, -7, 0, 1}, "w");
  const ValueId scale = g.floats({2}, {0.5f, 0.25f});
  const ValueId zero = g.constant<int8_t>({2}, ElementType::kInt8, {3, -2});
  const ValueId wf = g.value({3, 2});
  const NodeId dq = g.node("DequantizeLinear", {w, scale, zero}, {wf}, {{"axis", integer(1)}});
  const ValueId y = g.op("MatMul", {x, wf}, {1, 2});
  g.output(y);

  const DequantizedView view(g.graph);
  ASSERT_TRUE(view.changed());
  const ValueInfo& weight = view.view().value(wf);
  ASSERT_TRUE(weight.constant.has_value());
  EXPECT_EQ(weight.producer, kNoNode);
  const auto* data = static_cast<const float*>(weight.constant->data);
  const float expected[] = {(-128 - 3) * 0.5f, (127 + 2) * 0.25f, (5 - 3) * 0.5f,
                            (-7 + 2) * 0.25f,  (0 - 3) * 0.5f,    (1 + 2) * 0.25f};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(data[i], expected[i]) << i;
  EXPECT_TRUE(view.view().node(dq).inputs.empty());
  // The source graph is untouched.
  EXPECT_FALSE(g.graph.value(wf).constant.has_value());

  std::set<NodeId> claim = {g.producer(y)};
  EXPECT_EQ(view.take_along(claim), "");
  EXPECT_EQ(claim, (std::set<NodeId>{dq, g.producer(y)}));
  EXPECT_TRUE(view.reads_quantized_weight(claim));
}

TEST(DequantizedView, AnInt32BiasAndAUint8PerTensorWeightAreDequantized) {
  TestGraph g;
  const ValueId b = g.constant<int32_t>({2}, ElementType::kInt32, {-100000, 7});
  const ValueId bf = g.value({2});
  g.node("DequantizeLinear", {b, g.floats({2}, {0.001f, 0.5f})}, {bf}, {{"axis", integer(0)}});
  const ValueId w = g.constant<uint8_t>({2}, ElementType::kUInt8, {0, 255});
  const ValueId wf = g.value({2});
  g.node("DequantizeLinear",
         {w, g.scalar(0.1f), g.constant<uint8_t>({}, ElementType::kUInt8, {128})}, {wf});
  g.output(g.op("Add", {bf, wf}, {2}));
  const DequantizedView view(g.graph);
  const auto* bias = static_cast<const float*>(view.view().value(bf).constant->data);
  EXPECT_EQ(bias[0], -100000 * 0.001f);
  EXPECT_EQ(bias[1], 7 * 0.5f);
  const auto* weight = static_cast<const float*>(view.view().value(wf).constant->data);
  EXPECT_EQ(weight[0], -128 * 0.1f);
  EXPECT_EQ(weight[1], 127 * 0.1f);
}

struct PairGraph {
  TestGraph g;
  ValueId x, q, d, y;
  NodeId relu, quantize, dequantize, matmul;
};

// x -> Relu -> Q -> DQ -> MatMul, the DQ's scale `back_scale` (the Q's is 0.05).
void build_pair(PairGraph& p, float back_scale) {
  TestGraph& g = p.g;
  p.x = g.input({2, 4});
  const ValueId r = g.op("Relu", {p.x}, {2, 4});
  p.relu = g.producer(r);
  p.q = g.value({2, 4}, ElementType::kInt8);
  const ValueId zero = g.constant<int8_t>({}, ElementType::kInt8, {0});
  p.quantize = g.node("QuantizeLinear", {r, g.scalar(0.05f), zero}, {p.q});
  p.d = g.value({2, 4});
  p.dequantize = g.node("DequantizeLinear", {p.q, g.scalar(back_scale), zero}, {p.d});
  p.y = g.op("MatMul", {p.d, g.weight({4, 3})}, {2, 3});
  p.matmul = g.producer(p.y);
  g.output(p.y);
}

TEST(DequantizedView, AnActivationPairIsBypassedAndTakenAlong) {
  PairGraph p;
  build_pair(p, 0.05f);
  const DequantizedView view(p.g.graph);
  const GraphView& v = view.view();
  const ValueId relu_out = p.g.graph.node(p.relu).outputs[0];
  EXPECT_EQ(v.node(p.matmul).inputs[0], relu_out);
  EXPECT_EQ(v.value(relu_out).consumers, std::vector<NodeId>{p.matmul});
  EXPECT_TRUE(v.node(p.quantize).outputs.empty());
  EXPECT_TRUE(v.node(p.dequantize).outputs.empty());
  EXPECT_EQ(view.seen_through_count(), 2);

  std::set<NodeId> claim = {p.relu, p.matmul};
  EXPECT_EQ(view.take_along(claim), "");
  EXPECT_EQ(claim, (std::set<NodeId>{p.relu, p.quantize, p.dequantize, p.matmul}));
  EXPECT_FALSE(view.reads_quantized_weight(claim));  // its weight is float
}

TEST(DequantizedView, APairThatDoesNotRoundTripIsKept) {
  PairGraph p;
  build_pair(p, 0.1f);  // dequantized with another scale: a real rescale, not a no-op
  const DequantizedView view(p.g.graph);
  EXPECT_EQ(view.view().node(p.matmul).inputs[0], p.d);
  EXPECT_EQ(view.seen_through_count(), 0);
}

TEST(DequantizedView, AClaimCannotTakeAValueReadOutsideIt) {
  PairGraph p;
  build_pair(p, 0.05f);
  // A second reader of the dequantized activation, outside the claim.
  const ValueId other = p.g.op("Sigmoid", {p.d}, {2, 4});
  p.g.output(other);
  const DequantizedView view(p.g.graph);
  std::set<NodeId> claim = {p.relu, p.matmul};
  const std::string why = view.take_along(claim);
  EXPECT_NE(why.find("is also read outside the claim"), std::string::npos) << why;
}

}  // namespace
}  // namespace npuflow
