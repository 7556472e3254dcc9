// The float reading of a quantized graph (graph/quantized_view.h): constant DequantizeLinears
// become their dequantized values, activation Q -> DQ pairs are bypassed, dynamic int8 linears
// read as float MatMuls, and a claim takes the seen-through nodes along, or says which value it
// cannot.
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

// Packs signed or unsigned 4-bit values two per byte, low nibble first, as ONNX stores them.
std::vector<uint8_t> packed_nibbles(const std::vector<int>& values) {
  std::vector<uint8_t> bytes((values.size() + 1) / 2, 0);
  for (size_t i = 0; i < values.size(); ++i)
    bytes[i / 2] |= static_cast<uint8_t>((values[i] & 0xF) << ((i % 2) * 4));
  return bytes;
}

TEST(DequantizedView, APackedInt4WeightIsDequantizedPerBlockAlongK) {
  // K = 5 rows in blocks of 2 along axis 0 (the last block short), N = 2 columns: scales and
  // zero points of shape [3, 2], as MatMulNBitsQuantizer's QDQ form writes them. Ten values is
  // an odd count of nibbles per row pair, so the packing crosses rows.
  TestGraph g;
  const std::vector<int> q = {-8, 7, 1, -1, 0, 3, -5, 6, 2, -2};
  const std::vector<int> zp = {1, -1, 0, 2, -3, 0};
  const std::vector<float> scale = {0.5f, 0.25f, 2.0f, 0.125f, 1.5f, 4.0f};
  const ValueId w = g.constant<uint8_t>({5, 2}, ElementType::kPackedInt4, packed_nibbles(q));
  const ValueId zero = g.constant<uint8_t>({3, 2}, ElementType::kPackedInt4, packed_nibbles(zp));
  const ValueId wf = g.value({5, 2});
  g.node("DequantizeLinear", {w, g.floats({3, 2}, scale), zero}, {wf},
         {{"axis", integer(0)}, {"block_size", integer(2)}});
  g.output(g.op("MatMul", {g.input({1, 5}), wf}, {1, 2}));

  const DequantizedView view(g.graph);
  ASSERT_TRUE(view.view().value(wf).constant.has_value());
  const auto* data = static_cast<const float*>(view.view().value(wf).constant->data);
  for (int row = 0; row < 5; ++row) {
    for (int col = 0; col < 2; ++col) {
      const int i = row * 2 + col, s = (row / 2) * 2 + col;
      EXPECT_EQ(data[i], static_cast<float>(q[i] - zp[s]) * scale[s]) << row << "," << col;
    }
  }
}

// MatMulNBitsQuantizer's symmetric QDQ form: int4 blocks along K with no zero point input (0),
// here one block longer than K (its block_size 128 on a K of 64 writes one short block), and a
// negative scale where the block's extreme is positive (it divides that extreme by -8).
TEST(DequantizedView, ASymmetricInt4WeightWithoutZeroPointsIsDequantizedPerBlock) {
  TestGraph g;
  const std::vector<int> q = {-8, 7, 1, -1, 0, 3, -5, 6, 2, -2};
  const std::vector<float> scale = {0.5f, -0.25f};
  const ValueId w = g.constant<uint8_t>({5, 2}, ElementType::kPackedInt4, packed_nibbles(q));
  const ValueId wf = g.value({5, 2});
  g.node("DequantizeLinear", {w, g.floats({1, 2}, scale)}, {wf},
         {{"axis", integer(0)}, {"block_size", integer(8)}});
  g.output(g.op("MatMul", {g.input({1, 5}), wf}, {1, 2}));

  const DequantizedView view(g.graph);
  ASSERT_TRUE(view.view().value(wf).constant.has_value());
  const auto* data = static_cast<const float*>(view.view().value(wf).constant->data);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(data[i], static_cast<float>(q[i]) * scale[i % 2]) << i;
}

TEST(DequantizedView, AUint4WeightOfOnnxRuntimesDomainIsDequantizedPerColumn) {
  // onnxruntime.quantization writes 4-bit DequantizeLinear in com.microsoft before opset 21.
  TestGraph g;
  const std::vector<int> q = {0, 15, 8, 9, 3, 12};
  const ValueId w = g.constant<uint8_t>({3, 2}, ElementType::kPackedUInt4, packed_nibbles(q));
  const ValueId zero = g.constant<uint8_t>({2}, ElementType::kPackedUInt4, packed_nibbles({8, 7}));
  const ValueId wf = g.value({3, 2});
  g.node("DequantizeLinear", {w, g.floats({2}, {0.5f, 0.25f}), zero}, {wf}, {{"axis", integer(1)}},
         "com.microsoft");
  g.output(g.op("MatMul", {g.input({1, 3}), wf}, {1, 2}));
  const DequantizedView view(g.graph);
  ASSERT_TRUE(view.view().value(wf).constant.has_value());
  const auto* data = static_cast<const float*>(view.view().value(wf).constant->data);
  const float expected[] = {-8 * 0.5f, 8 * 0.25f, 0, 2 * 0.25f, -5 * 0.5f, 5 * 0.25f};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(data[i], expected[i]) << i;
}

TEST(DequantizedView, BlockScalesThatDoNotCoverTheWeightLeaveItQuantized) {
  TestGraph g;
  const ValueId w = g.constant<int8_t>({5, 2}, ElementType::kInt8, std::vector<int8_t>(10, 1));
  const ValueId wf = g.value({5, 2});
  // Blocks of 2 along K = 5 need 3 x 2 scales; 2 x 2 cover only four rows.
  g.node("DequantizeLinear", {w, g.floats({2, 2}, {1, 1, 1, 1})}, {wf},
         {{"axis", integer(0)}, {"block_size", integer(2)}});
  g.output(g.op("MatMul", {g.input({1, 5}), wf}, {1, 2}));
  const DequantizedView view(g.graph);
  EXPECT_FALSE(view.changed());
}

TEST(DequantizedView, AnInt16ActivationPairOfOnnxRuntimesDomainIsBypassed) {
  TestGraph g;
  const ValueId x = g.input({2, 4});
  const ValueId q = g.value({2, 4}, ElementType::kInt16);
  const ValueId zero = g.constant<int16_t>({}, ElementType::kInt16, {-3});
  g.node("QuantizeLinear", {x, g.scalar(1e-4f), zero}, {q}, {}, "com.microsoft");
  const ValueId d = g.value({2, 4});
  g.node("DequantizeLinear", {q, g.scalar(1e-4f), zero}, {d}, {}, "com.microsoft");
  const ValueId y = g.op("MatMul", {d, g.weight({4, 3})}, {2, 3});
  g.output(y);
  const DequantizedView view(g.graph);
  EXPECT_EQ(view.view().node(g.producer(y)).inputs[0], x);
  EXPECT_EQ(view.seen_through_count(), 2);
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

// quantize_dynamic's linear: DynamicQuantizeLinear(x) -> MatMulInteger -> Cast -> Mul(., Mul(
// x_scale, w_scale)) -> Add(bias), the quantizer shared by `readers` such linears.
struct DynamicGraph {
  TestGraph g;
  ValueId x = kNoValue, quantized = kNoValue;
  NodeId quantize = kNoNode;
  struct Linear {
    ValueId weight = kNoValue, output = kNoValue, biased = kNoValue;
    NodeId matmul = kNoNode, cast = kNoNode, scale_mul = kNoNode, product = kNoNode, add = kNoNode;
  };
  std::vector<Linear> linears;
};

void build_dynamic(DynamicGraph& d, int readers, ElementType weight_type) {
  TestGraph& g = d.g;
  d.x = g.input({2, 3}, ElementType::kFloat32, "x");
  d.quantized = g.value({2, 3}, ElementType::kUInt8);
  const ValueId x_scale = g.value({});
  const ValueId x_zero = g.value({}, ElementType::kUInt8);
  d.quantize = g.node("DynamicQuantizeLinear", {d.x}, {d.quantized, x_scale, x_zero});
  for (int r = 0; r < readers; ++r) {
    DynamicGraph::Linear l;
    const std::vector<int8_t> values = {-128, 127, 5, -7, 0, 1};
    l.weight = weight_type == ElementType::kInt8
                   ? g.constant<int8_t>({3, 2}, weight_type, values, str_cat("w", r))
                   : g.constant<uint8_t>({3, 2}, weight_type, {0, 255, 133, 121, 128, 129},
                                         str_cat("w", r));
    const ValueId w_zero = weight_type == ElementType::kInt8
                               ? g.constant<int8_t>({2}, weight_type, {3, -2})
                               : g.constant<uint8_t>({2}, weight_type, {131, 126});
    const ValueId acc = g.value({2, 2}, ElementType::kInt32);
    l.matmul = g.node("MatMulInteger", {d.quantized, l.weight, x_zero, w_zero}, {acc});
    const ValueId cast = g.op("Cast", {acc}, {2, 2}, {{"to", integer(1)}});
    l.cast = g.producer(cast);
    const ValueId product = g.op("Mul", {x_scale, g.floats({2}, {0.5f, 0.25f})}, {2});
    l.product = g.producer(product);
    l.output = g.op("Mul", {cast, product}, {2, 2});
    l.scale_mul = g.producer(l.output);
    l.biased = g.op("Add", {l.output, g.floats({2}, {1.0f, -1.0f})}, {2, 2});
    l.add = g.producer(l.biased);
    g.output(l.biased);
    d.linears.push_back(l);
  }
}

TEST(DequantizedView, DynamicInt8LinearsReadAsFloatMatMulsOfTheirDequantizedWeights) {
  for (ElementType type : {ElementType::kInt8, ElementType::kUInt8}) {
    DynamicGraph d;
    build_dynamic(d, 3, type);
    for (QuantizedReading reading : {QuantizedReading::kAll, QuantizedReading::kDynamicOnly}) {
      const DequantizedView view(d.g.graph, reading);
      const GraphView& v = view.view();
      ASSERT_TRUE(view.changed());
      std::set<NodeId> claim;
      for (const DynamicGraph::Linear& l : d.linears) {
        const NodeInfo& mm = v.node(l.matmul);
        EXPECT_EQ(mm.op_type, "MatMul");
        EXPECT_EQ(mm.inputs, (std::vector<ValueId>{d.x, l.weight}));
        EXPECT_EQ(mm.outputs, std::vector<ValueId>{l.output});
        EXPECT_EQ(v.value(l.output).producer, l.matmul);
        const ValueInfo& w = v.value(l.weight);
        ASSERT_EQ(w.type, ElementType::kFloat32);
        const auto* data = static_cast<const float*>(w.constant->data);
        // (w - zp[n]) * scale[n] as the integer values the graph holds.
        const float expected[] = {(-128 - 3) * 0.5f, (127 + 2) * 0.25f, (5 - 3) * 0.5f,
                                  (-7 + 2) * 0.25f,  (0 - 3) * 0.5f,    (1 + 2) * 0.25f};
        for (int i = 0; i < 6; ++i) EXPECT_EQ(data[i], expected[i]) << i;
        const DynamicInt8Weight* integer = view.dynamic_weight(d.g.graph.value(l.weight).name);
        ASSERT_NE(integer, nullptr);
        EXPECT_EQ(integer->type, type);
        EXPECT_EQ(integer->data, d.g.graph.value(l.weight).constant->data);
        EXPECT_EQ(integer->scales, (std::vector<float>{0.5f, 0.25f}));
        EXPECT_EQ(integer->k, 3);
        EXPECT_EQ(integer->n, 2);
        claim.insert({l.matmul, l.add});
      }
      EXPECT_EQ(v.value(d.x).consumers.size(), 3u);
      EXPECT_EQ(view.take_along(claim), "");
      EXPECT_TRUE(claim.count(d.quantize));
      for (const DynamicGraph::Linear& l : d.linears) {
        for (NodeId n : {l.cast, l.scale_mul, l.product}) EXPECT_TRUE(claim.count(n));
      }
      EXPECT_TRUE(view.reads_quantized_weight(claim));
      // The source graph is untouched.
      EXPECT_EQ(d.g.graph.node(d.linears[0].matmul).op_type, "MatMulInteger");
    }
  }
}

TEST(DequantizedView, AQuantizedActivationReadElsewhereKeepsEveryLinearOfItsQuantizer) {
  DynamicGraph d;
  build_dynamic(d, 2, ElementType::kInt8);
  d.g.output(d.g.op("Cast", {d.quantized}, {2, 3}, {{"to", integer(1)}}));
  const DequantizedView view(d.g.graph);
  EXPECT_FALSE(view.changed());
  for (const DynamicGraph::Linear& l : d.linears) {
    EXPECT_EQ(view.view().node(l.matmul).op_type, "MatMulInteger");
    EXPECT_EQ(view.dynamic_weight(d.g.graph.value(l.weight).name), nullptr);
  }
}

TEST(DequantizedView, OnlyDynamicLinearsAreReadThroughForW8A8) {
  TestGraph g;
  const ValueId x = g.input({1, 3});
  const ValueId w = g.constant<int8_t>({3, 2}, ElementType::kInt8, {-128, 127, 5, -7, 0, 1}, "w");
  const ValueId wf = g.value({3, 2});
  g.node("DequantizeLinear", {w, g.floats({2}, {0.5f, 0.25f})}, {wf}, {{"axis", integer(1)}});
  g.output(g.op("MatMul", {x, wf}, {1, 2}));
  EXPECT_TRUE(DequantizedView(g.graph).changed());
  EXPECT_FALSE(DequantizedView(g.graph, QuantizedReading::kDynamicOnly).changed());
}

TEST(DequantizedView, AGatherOfAQuantizedTableReadsAsTheGatherOfItsValues) {
  TestGraph g;
  const ValueId ids = g.input({1, 2}, ElementType::kInt64, "ids");
  const ValueId table =
      g.constant<uint8_t>({3, 2}, ElementType::kUInt8, {0, 255, 128, 129, 7, 200}, "table");
  const ValueId rows = g.value({1, 2, 2}, ElementType::kUInt8);
  const NodeId gather = g.node("Gather", {table, ids}, {rows});
  const ValueId values = g.value({1, 2, 2});
  const NodeId dq =
      g.node("DequantizeLinear",
             {rows, g.scalar(0.5f), g.constant<uint8_t>({}, ElementType::kUInt8, {128})}, {values});
  const ValueId out = g.op("Relu", {values}, {1, 2, 2});
  g.output(out);
  const DequantizedView view(g.graph, QuantizedReading::kDynamicOnly);
  const GraphView& v = view.view();
  ASSERT_TRUE(view.changed());
  EXPECT_EQ(v.node(gather).outputs, std::vector<ValueId>{values});
  EXPECT_EQ(v.value(values).producer, gather);
  ASSERT_EQ(v.value(table).type, ElementType::kFloat32);
  const auto* data = static_cast<const float*>(v.value(table).constant->data);
  const float expected[] = {-64.0f, 63.5f, 0.0f, 0.5f, -60.5f, 36.0f};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(data[i], expected[i]) << i;
  std::set<NodeId> claim = {gather, g.producer(out)};
  EXPECT_EQ(view.take_along(claim), "");
  EXPECT_TRUE(claim.count(dq));
  EXPECT_TRUE(view.reads_quantized_weight(claim));
}

}  // namespace
}  // namespace npuflow
