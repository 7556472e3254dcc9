// Which nodes around an encoder claim become its tensor program (graph/encoder/side_program.*),
// on hand-built graphs: the accepted forms and the near misses that keep a value outside.
#include "graph/encoder/side_program.h"

#include <gtest/gtest.h>

#include "encoder_test_graph.h"

namespace npuflow::encoder_test {
namespace {

// The BERT mask (1 - float(mask[:, None, None, :])) * lowest from a graph input, read by one
// "claimed" node (standing in for the attention's score Add).
struct MaskGraph {
  TestGraph g;
  ValueId mask = kNoValue, unsqueezed = kNoValue, bias = kNoValue;
  NodeId reader = kNoNode;

  MaskGraph() {
    mask = g.input({2, 5}, ElementType::kInt64, "attention_mask");
    unsqueezed = g.op("Unsqueeze", {mask, g.i64s({1, 2})}, {2, 1, 1, 5}, {}, ElementType::kInt64);
    const ValueId as_float =
        g.op("Cast", {unsqueezed}, {2, 1, 1, 5}, {{"to", integer(1)}}, ElementType::kFloat32);
    const ValueId inverted = g.op("Sub", {g.scalar(1.0f), as_float}, {2, 1, 1, 5});
    bias = g.op("Mul", {inverted, g.scalar(-3.4e38f)}, {2, 1, 1, 5});
    const ValueId scores = g.input({2, 4, 5, 5});
    reader = g.producer(g.op("Add", {scores, bias}, {2, 4, 5, 5}));
  }
};

TEST(SideProgram, TakesTheMaskArithmeticFromAGraphInput) {
  MaskGraph m;
  encoder::SideProgram p = encoder::build_side_program(m.g.graph, {m.bias}, {m.reader});
  ASSERT_TRUE(p.computed.count(m.bias)) << p.why_not[m.bias];
  EXPECT_EQ(p.nodes.size(), 4u);
  EXPECT_EQ(p.program.input_names, std::vector<std::string>{"attention_mask"});
  EXPECT_EQ(p.program.output_names, std::vector<std::string>{m.g.name(m.bias)});
  EXPECT_EQ(p.program.constants.size(), 3u);  // the axes, 1 and lowest
}

TEST(SideProgram, AValueReadOutsideTheClaimStaysOutside) {
  MaskGraph m;
  m.g.output(m.g.op("Identity", {m.unsqueezed}, {2, 1, 1, 5}, {}, ElementType::kInt64));
  encoder::SideProgram p = encoder::build_side_program(m.g.graph, {m.bias}, {m.reader});
  // The Unsqueeze stays outside (its value is an input of the program); the rest is taken.
  ASSERT_TRUE(p.computed.count(m.bias));
  EXPECT_EQ(p.nodes.count(m.g.producer(m.unsqueezed)), 0u);
  EXPECT_EQ(p.program.input_names, std::vector<std::string>{m.g.name(m.unsqueezed)});
}

TEST(SideProgram, AGraphOutputStaysOutside) {
  MaskGraph m;
  m.g.output(m.bias);
  encoder::SideProgram p = encoder::build_side_program(m.g.graph, {m.bias}, {m.reader});
  EXPECT_FALSE(p.computed.count(m.bias));
  EXPECT_NE(p.why_not[m.bias].find("graph output"), std::string::npos) << p.why_not[m.bias];
}

TEST(SideProgram, AnOpOutsideTheSetStopsItAndIsNamed) {
  TestGraph g;
  const ValueId x = g.input({2, 5});
  const ValueId soft = g.op("Softmax", {x}, {2, 5});
  const ValueId bias = g.op("Neg", {soft}, {2, 5});
  const NodeId reader = g.producer(g.op("Add", {g.input({2, 5}), bias}, {2, 5}));
  encoder::SideProgram p = encoder::build_side_program(g.graph, {bias}, {reader});
  // The Neg joins; Softmax's output is then the program's input.
  ASSERT_TRUE(p.computed.count(bias));
  EXPECT_EQ(p.program.input_names, std::vector<std::string>{g.name(soft)});
  // A program that needs a value the claim itself computes cannot run before it.
  encoder::SideProgram inside =
      encoder::build_side_program(g.graph, {bias}, {reader, g.producer(soft)});
  EXPECT_FALSE(inside.computed.count(bias));
  EXPECT_NE(inside.why_not[bias].find("the claim computes itself"), std::string::npos);
}

TEST(SideProgram, AShapeOfAClaimedValueReadsItsStandIn) {
  TestGraph g;
  const ValueId ids = g.input({2, 5}, ElementType::kInt64, "input_ids");
  const ValueId table = g.weight({10, 4});
  const ValueId sum = g.op("Gather", {table, ids}, {2, 5, 4});
  const ValueId stream = g.op("LayerNormalization", {sum, g.weight({4})}, {2, 5, 4});
  const NodeId norm = g.producer(stream);
  const ValueId dims = g.op("Shape", {stream}, {3}, {}, ElementType::kInt64);
  const ValueId fill = g.op("ConstantOfShape", {dims}, {2, 5, 4});
  const NodeId reader = g.producer(g.op("Add", {stream, fill}, {2, 5, 4}));
  const std::set<NodeId> claimed = {norm, reader};
  // Without the stand-in the Shape stays outside and its value is the program's input.
  encoder::SideProgram outside = encoder::build_side_program(g.graph, {sum, fill}, claimed);
  EXPECT_EQ(outside.nodes.count(g.producer(dims)), 0u);
  EXPECT_EQ(outside.program.input_names.back(), g.name(dims));
  encoder::SideProgram p =
      encoder::build_side_program(g.graph, {sum, fill}, claimed, {{stream, sum}});
  EXPECT_TRUE(p.computed.count(sum));
  EXPECT_TRUE(p.computed.count(fill));
  EXPECT_EQ(p.program.input_names, std::vector<std::string>{"input_ids"});
}

TEST(SideProgram, AReaderThatOnlyFeedsTheClaimIsTakenIn) {
  // ORT's transpose optimizer puts a Transpose of a rotary table in front of a claimed node; the
  // claim reads the table through it.
  TestGraph g;
  const ValueId t = g.input({1, 5}, ElementType::kInt64);
  const ValueId cos = g.op("Cast", {t}, {1, 5}, {{"to", integer(1)}});
  const ValueId moved = g.op("Transpose", {cos}, {5, 1}, {{"perm", ints({1, 0})}});
  const NodeId rotation = g.producer(g.op("Mul", {g.input({5, 1}), moved}, {5, 1}));
  const NodeId other = g.producer(g.op("Mul", {g.input({1, 5}), cos}, {1, 5}));
  encoder::SideProgram p = encoder::build_side_program(g.graph, {cos}, {rotation, other});
  ASSERT_TRUE(p.computed.count(cos));
  EXPECT_TRUE(p.nodes.count(g.producer(moved)));
}

TEST(SideProgram, OnlyAnOuterProductMatMulJoins) {
  for (int64_t k : {1, 3}) {
    TestGraph g;
    const ValueId positions = g.input({1, 5, k});
    const ValueId angles = g.op("MatMul", {positions, g.weight({1, k, 4})}, {1, 5, 4});
    const ValueId table = g.op("Cos", {angles}, {1, 5, 4});
    const NodeId reader = g.producer(g.op("Mul", {g.input({1, 5, 4}), table}, {1, 5, 4}));
    encoder::SideProgram p = encoder::build_side_program(g.graph, {table}, {reader});
    SCOPED_TRACE(k);
    EXPECT_EQ(p.nodes.count(g.producer(angles)), k == 1 ? 1u : 0u);
  }
}

TEST(SideProgram, UnknownAttributesAndTypesKeepANodeOut) {
  TestGraph g;
  const ValueId x = g.input({2, 5}, ElementType::kFloat16);
  const ValueId y = g.op("Cast", {x}, {2, 5}, {{"to", integer(1)}});
  const ValueId z = g.op("Neg", {g.input({2, 5})}, {2, 5}, {{"alpha", real(1.0f)}});
  const NodeId reader = g.producer(g.op("Add", {y, z}, {2, 5}));
  encoder::SideProgram p = encoder::build_side_program(g.graph, {y, z}, {reader});
  EXPECT_FALSE(p.computed.count(y));
  EXPECT_FALSE(p.computed.count(z));
  EXPECT_NE(p.why_not[y].find("float16"), std::string::npos) << p.why_not[y];
  EXPECT_NE(p.why_not[z].find("alpha"), std::string::npos) << p.why_not[z];
}

}  // namespace
}  // namespace npuflow::encoder_test
