// The QDQ group matcher on hand-built graphs: what it claims, and every refusal it must make.
#include "graph/qdq_matcher.h"

#include <gtest/gtest.h>

namespace npuflow {
namespace {

// Owns the constant bytes a GraphView borrows.
struct GraphBuilder {
  GraphView graph;
  std::vector<std::vector<uint8_t>> storage;

  ValueId tensor(const std::string& name, ElementType type, std::vector<int64_t> shape) {
    ValueInfo info;
    info.name = name;
    info.type = type;
    info.shape = std::move(shape);
    info.has_shape = true;
    return graph.add_value(std::move(info));
  }
  template <typename T>
  ValueId constant(const std::string& name, ElementType type, std::vector<int64_t> shape,
                   std::vector<T> data) {
    ValueId id = tensor(name, type, std::move(shape));
    storage.emplace_back(reinterpret_cast<const uint8_t*>(data.data()),
                         reinterpret_cast<const uint8_t*>(data.data() + data.size()));
    graph.values[id].constant = ConstantData{storage.back().data(), storage.back().size()};
    return id;
  }
  NodeId node(const std::string& op, std::vector<ValueId> in, std::vector<ValueId> out,
              std::vector<std::pair<std::string, Attribute>> attrs = {}) {
    NodeInfo info;
    info.name = op + std::to_string(graph.nodes.size());
    info.op_type = op;
    info.inputs = std::move(in);
    info.outputs = std::move(out);
    info.attributes = std::move(attrs);
    return graph.add_node(std::move(info));
  }
};

struct QdqGraphOptions {
  int64_t k = 32, n = 16;
  int w_scales = 1;   // 1, n (axis 1) or k (axis 0)
  int x_scales = -1;  // -1: a scalar; otherwise a 1-D scale and zero point of this length
  int y_scales = -1;  // the same for the output QuantizeLinear
  int64_t w_axis = 1;
  int64_t block_size = 0;
  bool weight_constant = true;
  bool with_q = true;
  bool share_x_dq = false;
  ElementType weight_type = ElementType::kInt8;
  float w_scale = 0.01f;
};

GraphBuilder qdq_graph(const QdqGraphOptions& o) {
  GraphBuilder b;
  ValueId x = b.tensor("x", ElementType::kInt8, {-1, o.k});
  b.graph.values[x].is_graph_input = true;
  auto params = [&](const std::string& prefix, int count, float scale, int8_t zero_point) {
    std::vector<int64_t> shape;
    if (count >= 0) shape.push_back(count);
    const size_t elements = count >= 0 ? static_cast<size_t>(count) : 1;
    return std::pair{b.constant<float>(prefix + "s", ElementType::kFloat32, shape,
                                       std::vector<float>(elements, scale)),
                     b.constant<int8_t>(prefix + "z", ElementType::kInt8, shape,
                                        std::vector<int8_t>(elements, zero_point))};
  };
  auto [xs, xz] = params("x", o.x_scales, 0.1f, -3);
  ValueId xf = b.tensor("xf", ElementType::kFloat32, {-1, o.k});
  b.node("DequantizeLinear", {x, xs, xz}, {xf});
  ValueId w = o.weight_constant ? b.constant<int8_t>("w", o.weight_type, {o.k, o.n},
                                                     std::vector<int8_t>(o.k * o.n, 1))
                                : b.tensor("w", o.weight_type, {o.k, o.n});
  ValueId ws = b.constant<float>("ws", ElementType::kFloat32, {o.w_scales},
                                 std::vector<float>(o.w_scales, o.w_scale));
  ValueId wf = b.tensor("wf", ElementType::kFloat32, {o.k, o.n});
  std::vector<std::pair<std::string, Attribute>> attrs = {{"axis", Attribute{o.w_axis, {}, {}}}};
  if (o.block_size) attrs.push_back({"block_size", Attribute{o.block_size, {}, {}}});
  b.node("DequantizeLinear", {w, ws, kNoValue}, {wf}, attrs);
  ValueId y = b.tensor("y", ElementType::kFloat32, {-1, o.n});
  b.node("MatMul", {xf, wf}, {y});
  if (o.share_x_dq) {
    ValueId other = b.tensor("other", ElementType::kFloat32, {-1, o.k});
    b.node("Relu", {xf}, {other});
  }
  if (o.with_q) {
    auto [ys, yz] = params("y", o.y_scales, 0.5f, 2);
    ValueId yq = b.tensor("yq", ElementType::kInt8, {-1, o.n});
    b.node("QuantizeLinear", {y, ys, yz}, {yq});
    b.graph.values[yq].is_graph_output = true;
  } else {
    b.graph.values[y].is_graph_output = true;
  }
  return b;
}

TEST(QdqMatcher, ClaimsAPerTensorGroupWithItsOutputQuantize) {
  auto b = qdq_graph({});
  ClaimSet set = match_qdq_matmuls(b.graph, {});
  ASSERT_EQ(set.claims.size(), 1u);
  EXPECT_EQ(set.candidates, 1);
  const Claim& claim = set.claims[0];
  EXPECT_EQ(claim.nodes.size(), 4u);
  EXPECT_EQ(claim.qdq.activation_name, "x");
  EXPECT_FALSE(claim.qdq.activation_dequantized);
  EXPECT_EQ(claim.qdq.output_name, "yq");
  EXPECT_EQ(claim.qdq.spec.k, 32);
  EXPECT_EQ(claim.qdq.spec.n, 16);
  EXPECT_EQ(claim.qdq.spec.x_zero_point, -3);
  ASSERT_TRUE(claim.qdq.spec.output.has_value());
  EXPECT_EQ(claim.qdq.spec.output->zero_point, 2);
}

TEST(QdqMatcher, ClaimsPerColumnScalesAndFloatOutput) {
  QdqGraphOptions o;
  o.w_scales = 16;
  o.with_q = false;
  auto b = qdq_graph(o);
  ClaimSet set = match_qdq_matmuls(b.graph, {});
  ASSERT_EQ(set.claims.size(), 1u);
  EXPECT_EQ(set.claims[0].nodes.size(), 3u);
  EXPECT_EQ(set.claims[0].qdq.spec.w_scales.size(), 16u);
  EXPECT_FALSE(set.claims[0].qdq.spec.output.has_value());
}

void expect_refusal(const QdqGraphOptions& o, const std::string& reason) {
  auto b = qdq_graph(o);
  ClaimSet set = match_qdq_matmuls(b.graph, {});
  EXPECT_TRUE(set.claims.empty()) << reason;
  ASSERT_EQ(set.refusals.size(), 1u) << reason;
  EXPECT_EQ(set.refusals[0].reason, reason);
}

TEST(QdqMatcher, RefusesScalesAlongK) {
  QdqGraphOptions o;
  o.w_scales = 32;
  o.w_axis = 0;
  expect_refusal(o, "scale_along_k");
}

TEST(QdqMatcher, RefusesBlockedScales) {
  QdqGraphOptions o;
  o.block_size = 16;
  expect_refusal(o, "blocked_scale");
}

TEST(QdqMatcher, RefusesNonConstantWeights) {
  QdqGraphOptions o;
  o.weight_constant = false;
  expect_refusal(o, "weight_not_constant");
}

TEST(QdqMatcher, RefusesUnsupportedWeightTypes) {
  QdqGraphOptions o;
  o.weight_type = ElementType::kInt32;
  expect_refusal(o, "unsupported_type");
}

// Empty scales and weights are valid protobuf but no usable quantization: each is refused by name,
// so the CPU EP reports (or runs) the node itself and no kernel ever indexes an empty vector.
TEST(QdqMatcher, RefusesEmptyWeightScales) {
  QdqGraphOptions o;
  o.w_scales = 0;
  expect_refusal(o, "empty_quant_params");
}

// The exact epilogue assumes positive scales; the float reading of a constant weight takes any
// finite one (quantized_view_test), an integer group does not.
TEST(QdqMatcher, RefusesANegativeOrZeroWeightScale) {
  for (float scale : {-0.01f, 0.0f}) {
    QdqGraphOptions o;
    o.w_scale = scale;
    expect_refusal(o, "invalid_scale");
  }
}

TEST(QdqMatcher, RefusesAWeightScaleCountThatIsNeitherOneNorN) {
  QdqGraphOptions o;
  o.w_scales = 5;
  expect_refusal(o, "unsupported_scale_shape");
}

TEST(QdqMatcher, RefusesEmptyActivationScales) {
  QdqGraphOptions o;
  o.x_scales = 0;
  expect_refusal(o, "empty_quant_params");
}

TEST(QdqMatcher, RefusesEmptyOutputScales) {
  QdqGraphOptions o;
  o.y_scales = 0;
  expect_refusal(o, "empty_quant_params");
}

TEST(QdqMatcher, LeavesAPerColumnOutputQuantizeOutside) {
  QdqGraphOptions o;
  o.y_scales = 16;
  auto b = qdq_graph(o);
  ClaimSet set = match_qdq_matmuls(b.graph, {});
  ASSERT_EQ(set.claims.size(), 1u);
  EXPECT_FALSE(set.claims[0].qdq.spec.output.has_value());
  EXPECT_EQ(set.claims[0].nodes.size(), 3u);
}

TEST(QdqMatcher, RefusesAnOutputScaleCountThatIsNeitherOneNorN) {
  QdqGraphOptions o;
  o.y_scales = 5;
  expect_refusal(o, "unsupported_scale_shape");
}

TEST(QdqMatcher, RefusesEmptyWeights) {
  for (auto [k, n] : {std::pair<int64_t, int64_t>{0, 16}, {32, 0}}) {
    QdqGraphOptions o;
    o.k = k;
    o.n = n;
    expect_refusal(o, "empty_weight");
  }
}

TEST(QdqMatcher, KeepsASharedActivationDequantizeOutside) {
  QdqGraphOptions o;
  o.share_x_dq = true;
  auto b = qdq_graph(o);
  ClaimSet set = match_qdq_matmuls(b.graph, {});
  ASSERT_EQ(set.claims.size(), 1u);
  EXPECT_TRUE(set.claims[0].qdq.activation_dequantized);
  EXPECT_EQ(set.claims[0].qdq.activation_name, "xf");
  EXPECT_EQ(set.claims[0].nodes.size(), 3u);  // DQ(W), MatMul, Q
}

TEST(QdqMatcher, TheKnobTurnsTheClaimOff) {
  auto b = qdq_graph({});
  QdqMatcherOptions off;
  off.enabled = false;
  ClaimSet set = match_qdq_matmuls(b.graph, off);
  EXPECT_TRUE(set.claims.empty());
  ASSERT_EQ(set.refusals.size(), 1u);
  EXPECT_EQ(set.refusals[0].reason, "disabled_by_knob");
}

TEST(QdqMatcher, IgnoresFloatMatMuls) {
  GraphBuilder b;
  ValueId a = b.tensor("a", ElementType::kFloat32, {4, 8});
  ValueId w = b.constant<float>("w", ElementType::kFloat32, {8, 2}, std::vector<float>(16, 1));
  ValueId y = b.tensor("y", ElementType::kFloat32, {4, 2});
  b.node("MatMul", {a, w}, {y});
  ClaimSet set = match_qdq_matmuls(b.graph, {});
  EXPECT_EQ(set.candidates, 0);
  EXPECT_TRUE(set.claims.empty());
  EXPECT_TRUE(set.refusals.empty());
}

}  // namespace
}  // namespace npuflow
