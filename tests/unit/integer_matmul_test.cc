// DynamicQuantizeLinear's arithmetic, the integer MatMul kernel against a direct int64 loop on the
// host and on the simulator, and the integer matcher on hand-built graphs: what it claims, and the
// near misses it must refuse.
#include "quant/integer_matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "graph/integer_matmul_matcher.h"
#include "host/host_device.h"
#include "quant/dynamic_quantize.h"
#include "sim/sim_device.h"

namespace npuflow {
namespace {

TEST(DynamicQuantize, AllZeroInputTakesScaleOne) {
  const std::vector<float> x(8, 0.0f);
  const DynamicQuantization q = dynamic_quantization_params(x.data(), 8);
  EXPECT_EQ(q.scale, 1.0f);
  EXPECT_EQ(q.zero_point, 0);
}

TEST(DynamicQuantize, RangeAlwaysIncludesZero) {
  const std::vector<float> positive = {1.0f, 2.0f, 51.0f};
  EXPECT_EQ(dynamic_quantization_params(positive.data(), 3).zero_point, 0);
  EXPECT_EQ(dynamic_quantization_params(positive.data(), 3).scale, 51.0f / 255.0f);
  const std::vector<float> negative = {-1.0f, -25.5f};
  EXPECT_EQ(dynamic_quantization_params(negative.data(), 2).zero_point, 255);
}

TEST(DynamicQuantize, ZeroPointAndValuesRoundHalfToEvenAndSaturate) {
  // scale = 255 / 255 = 1 exactly; the initial zero point 2.5 rounds to 2.
  const std::vector<float> x = {-2.5f, 252.5f,   0.5f,
                                1.5f,  -1000.0f, std::numeric_limits<float>::quiet_NaN()};
  const DynamicQuantization q = dynamic_quantization_params(x.data(), 2);
  ASSERT_EQ(q.scale, 1.0f);
  ASSERT_EQ(q.zero_point, 2);
  std::vector<uint8_t> y(x.size());
  quantize_uint8(x.data(), static_cast<int64_t>(x.size()), q, y.data());
  // -2.5 -> -2 + 2; 252.5 -> 252 + 2; 0.5 -> 0 + 2; 1.5 -> 2 + 2; saturated; NaN -> lower bound.
  EXPECT_EQ(std::vector<int>(y.begin(), y.end()), (std::vector<int>{0, 254, 2, 4, 0, 0}));
}

TEST(DynamicQuantize, ChunksOnAPoolGiveTheSequentialDefinitionBitForBit) {
  // Over several chunks, with ties, NaNs, signed zeros and the extremes in late chunks, run on a
  // pool that takes the chunks in reverse order.
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> spread(-3.0f, 5.0f);
  std::vector<float> x(50001);
  for (float& v : x) v = spread(rng);
  x[40000] = -7.25f;
  x[49999] = 9.5f;
  x[17] = std::numeric_limits<float>::quiet_NaN();
  x[33000] = -0.0f;
  const ExecContext reversed{[](size_t count, const std::function<void(size_t)>& task) {
    for (size_t i = count; i-- > 0;) task(i);
  }};
  float lo = 0.0f, hi = 0.0f;
  for (float v : x) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  const float scale = (hi - lo) / 255.0f;
  const auto zero_point =
      static_cast<uint8_t>(std::nearbyint(std::clamp(0.0f - lo / scale, 0.0f, 255.0f)));
  const DynamicQuantization q =
      dynamic_quantization_params(x.data(), static_cast<int64_t>(x.size()), reversed);
  ASSERT_EQ(q.scale, scale);
  ASSERT_EQ(q.zero_point, zero_point);
  // Exact ties of x / scale (k + 0.5) at a few places.
  for (int k : {3, 4, -5})
    x[static_cast<size_t>(1000 + k)] = (static_cast<float>(k) + 0.5f) * scale;
  std::vector<uint8_t> got(x.size());
  quantize_uint8(x.data(), static_cast<int64_t>(x.size()), q, got.data(), reversed);
  for (size_t i = 0; i < x.size(); ++i) {
    float v = x[i] / q.scale;
    v = v > -static_cast<float>(q.zero_point) ? v : -static_cast<float>(q.zero_point);
    v = v < 255.0f - q.zero_point ? v : 255.0f - q.zero_point;
    const auto want = static_cast<uint8_t>(static_cast<int32_t>(std::nearbyint(v)) + q.zero_point);
    ASSERT_EQ(got[i], want) << i << " x=" << x[i];
  }
}

// The group's definition, one operation at a time: int64 sums, then fp32 Cast, Mul, Add.
std::vector<float> direct(const std::vector<uint8_t>& a, int32_t a_zp, float a_scale, int64_t m,
                          const std::vector<uint8_t>& w, const std::vector<int32_t>& w_zp,
                          const IntegerMatMulSpec& spec) {
  std::vector<float> y(static_cast<size_t>(m * spec.n));
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < spec.n; ++c) {
      int64_t acc = 0;
      for (int64_t kk = 0; kk < spec.k; ++kk) {
        acc += (int64_t{a[r * spec.k + kk]} - a_zp) * (int64_t{w[kk * spec.n + c]} - w_zp[c]);
      }
      const float multiplier = a_scale * spec.w_scales[c];
      const float scaled = static_cast<float>(static_cast<int32_t>(acc)) * multiplier;
      y[r * spec.n + c] = spec.bias.empty() ? scaled : scaled + spec.bias[c];
    }
  }
  return y;
}

class IntegerMatMulKernel : public ::testing::TestWithParam<std::string> {};

TEST_P(IntegerMatMulKernel, MatchesTheDirectDefinitionBitForBit) {
  const int64_t k = 96, n = 48;
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> w(k * n);
  for (auto& v : w) v = static_cast<uint8_t>(byte(rng));
  IntegerMatMulSpec spec;
  spec.k = k;
  spec.n = n;
  spec.float_output = true;
  for (int64_t c = 0; c < n; ++c) {
    spec.w_zero_points.push_back(120 + static_cast<int>(c % 9));
    spec.w_scales.push_back(0.001f * static_cast<float>(1 + c % 7) / 3.0f);
    spec.bias.push_back(0.37f * static_cast<float>(c) - 5.0f);
  }
  std::shared_ptr<Device> device;
  if (GetParam() == "sim") {
    device = std::make_shared<sim::SimDevice>(sim::SimOptions{});
  } else {
    device = std::make_shared<HostDevice>(DeviceOptions{});
  }
  Logger logger{LogLevel::kError, [](LogLevel, const std::string&) {}};
  auto kernel = IntegerMatMul::create("t", spec, w.data(), ElementType::kUInt8, device, 1, logger);
  ASSERT_TRUE(kernel.is_ok()) << kernel.status().to_string();
  for (int64_t m : {1, 5, 16}) {
    std::vector<uint8_t> a(m * k);
    for (auto& v : a) v = static_cast<uint8_t>(byte(rng));
    const int32_t a_zp = 77;
    const float a_scale = 0.0173f;
    std::vector<float> y(m * n);
    ASSERT_TRUE(
        kernel.value()->run(a.data(), ElementType::kUInt8, a_zp, a_scale, m, y.data(), {}).is_ok());
    const std::vector<float> want = direct(a, a_zp, a_scale, m, w, spec.w_zero_points, spec);
    for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], want[i]) << "m=" << m << " i=" << i;
  }
  EXPECT_GT(kernel.value()->counters().device_calls.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Devices, IntegerMatMulKernel, ::testing::Values("host", "sim"));

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

struct DynamicGraphOptions {
  int64_t k = 32, n = 16;
  bool weight_constant = true;
  bool share_quantized = false;  // a second reader of the DynamicQuantizeLinear's output
  int64_t cast_to = 1;           // FLOAT
  bool bias = true;
  bool zero_point_from_elsewhere = false;  // A's zero point is some other runtime value
  int w_scales = 16;
};

GraphBuilder dynamic_graph(const DynamicGraphOptions& o) {
  GraphBuilder b;
  const ValueId x = b.tensor("x", ElementType::kFloat32, {2, -1, o.k});
  b.graph.values[x].is_graph_input = true;
  const ValueId xq = b.tensor("xq", ElementType::kUInt8, {2, -1, o.k});
  const ValueId xs = b.tensor("xs", ElementType::kFloat32, {});
  const ValueId xz = b.tensor("xz", ElementType::kUInt8, {});
  b.node("DynamicQuantizeLinear", {x}, {xq, xs, xz});
  const ValueId w = o.weight_constant ? b.constant<int8_t>("w", ElementType::kInt8, {o.k, o.n},
                                                           std::vector<int8_t>(o.k * o.n, 3))
                                      : b.tensor("w", ElementType::kInt8, {o.k, o.n});
  const ValueId wz = b.constant<int8_t>("wz", ElementType::kInt8, {o.w_scales},
                                        std::vector<int8_t>(o.w_scales, 0));
  const ValueId ws = b.constant<float>("ws", ElementType::kFloat32, {o.w_scales},
                                       std::vector<float>(o.w_scales, 0.01f));
  const ValueId s = b.tensor("s", ElementType::kFloat32, {o.w_scales});
  b.node("Mul", {xs, ws}, {s});
  ValueId a_zp = xz;
  if (o.zero_point_from_elsewhere) {
    a_zp = b.tensor("other_zp", ElementType::kUInt8, {});
    b.graph.values[a_zp].is_graph_input = true;
  }
  const ValueId acc = b.tensor("acc", ElementType::kInt32, {2, -1, o.n});
  b.node("MatMulInteger", {xq, w, a_zp, wz}, {acc});
  const ValueId accf = b.tensor("accf", ElementType::kFloat32, {2, -1, o.n});
  b.node("Cast", {acc}, {accf}, {{"to", Attribute{o.cast_to, {}, {}, {}}}});
  const ValueId y = b.tensor("y", ElementType::kFloat32, {2, -1, o.n});
  b.node("Mul", {accf, s}, {y});
  ValueId out = y;
  if (o.bias) {
    const ValueId bias =
        b.constant<float>("b", ElementType::kFloat32, {o.n}, std::vector<float>(o.n, 1.0f));
    out = b.tensor("yb", ElementType::kFloat32, {2, -1, o.n});
    b.node("Add", {bias, y}, {out});
  }
  b.graph.values[out].is_graph_output = true;
  if (o.share_quantized) {
    const ValueId other = b.tensor("other", ElementType::kUInt8, {2, -1, o.k});
    b.node("Identity", {xq}, {other});
    b.graph.values[other].is_graph_output = true;
  }
  return b;
}

ClaimSet match(const GraphBuilder& b, bool enabled = true) {
  return match_integer_matmuls(b.graph, IntegerMatcherOptions{enabled});
}

TEST(IntegerMatcher, ClaimsTheWholeDynamicGroup) {
  const ClaimSet set = match(dynamic_graph({}));
  ASSERT_EQ(set.claims.size(), 1u);
  const Claim& claim = set.claims[0];
  EXPECT_EQ(claim.kind, ClaimKind::kIntegerMatMul);
  EXPECT_EQ(claim.nodes.size(), 6u);  // DQL, scale Mul, MatMulInteger, Cast, Mul, Add
  EXPECT_TRUE(claim.integer.quantize_inside);
  EXPECT_EQ(claim.integer.activation_name, "x");
  EXPECT_EQ(claim.integer.output_name, "yb");
  EXPECT_TRUE(claim.integer.spec.float_output);
  EXPECT_EQ(claim.integer.spec.bias.size(), 16u);
  EXPECT_EQ(claim.integer.spec.w_scales.size(), 16u);
}

TEST(IntegerMatcher, KeepsASharedQuantizerOutsideAndReadsItsOutputs) {
  const ClaimSet set = match(dynamic_graph({.share_quantized = true}));
  ASSERT_EQ(set.claims.size(), 1u);
  const IntegerMatMulClaim& group = set.claims[0].integer;
  EXPECT_EQ(set.claims[0].nodes.size(), 5u);
  EXPECT_FALSE(group.quantize_inside);
  EXPECT_EQ(group.activation_name, "xq");
  EXPECT_EQ(group.activation_zero_point_name, "xz");
  EXPECT_EQ(group.activation_scale_name, "xs");
}

TEST(IntegerMatcher, PerTensorScaleAndNoBias) {
  const ClaimSet set = match(dynamic_graph({.bias = false, .w_scales = 1}));
  ASSERT_EQ(set.claims.size(), 1u);
  EXPECT_EQ(set.claims[0].nodes.size(), 5u);
  EXPECT_TRUE(set.claims[0].integer.spec.bias.empty());
  EXPECT_EQ(set.claims[0].integer.output_name, "y");
}

TEST(IntegerMatcher, ACastToAnotherTypeEndsTheGroupAtTheIntegerOutput) {
  const ClaimSet set = match(dynamic_graph({.cast_to = 7}));  // INT64
  ASSERT_EQ(set.claims.size(), 1u);
  const IntegerMatMulClaim& group = set.claims[0].integer;
  EXPECT_FALSE(group.spec.float_output);
  EXPECT_EQ(group.output_name, "acc");
  // The DynamicQuantizeLinear's scale feeds the unclaimed scale Mul: it stays outside.
  EXPECT_FALSE(group.quantize_inside);
  EXPECT_EQ(set.claims[0].nodes.size(), 1u);
}

TEST(IntegerMatcher, RefusesNearMisses) {
  auto reason = [](const GraphBuilder& b) {
    const ClaimSet set = match(b);
    EXPECT_TRUE(set.claims.empty());
    return set.refusals.empty() ? std::string() : set.refusals[0].reason;
  };
  EXPECT_EQ(reason(dynamic_graph({.weight_constant = false})), "weight_not_constant");
  EXPECT_EQ(reason(dynamic_graph({.zero_point_from_elsewhere = true})), "runtime_zero_point");
  EXPECT_EQ(reason(dynamic_graph({.k = 40000, .n = 1, .w_scales = 1})), "k_too_large");
  EXPECT_EQ(reason(dynamic_graph({.w_scales = 3})), "unsupported_zero_point");
  const ClaimSet off = match(dynamic_graph({}), false);
  ASSERT_EQ(off.refusals.size(), 1u);
  EXPECT_EQ(off.refusals[0].reason, "disabled_by_knob");
}

GraphBuilder qlinear_graph(bool scale_constant, std::vector<int64_t> w_shape) {
  GraphBuilder b;
  const int64_t k = w_shape[w_shape.size() - 2];
  const int64_t n = w_shape.back();
  const ValueId a = b.tensor("a", ElementType::kUInt8, {4, k});
  b.graph.values[a].is_graph_input = true;
  const ValueId as = scale_constant ? b.constant<float>("as", ElementType::kFloat32, {}, {0.1f})
                                    : b.tensor("as", ElementType::kFloat32, {});
  const ValueId az = b.constant<uint8_t>("az", ElementType::kUInt8, {}, {128});
  int64_t count = 1;
  for (int64_t d : w_shape) count *= d;
  const ValueId w =
      b.constant<int8_t>("w", ElementType::kInt8, w_shape, std::vector<int8_t>(count, 1));
  const ValueId ws = b.constant<float>("ws", ElementType::kFloat32, {n}, std::vector<float>(n, 1));
  const ValueId wz = b.constant<int8_t>("wz", ElementType::kInt8, {n}, std::vector<int8_t>(n, 0));
  const ValueId ys = b.constant<float>("ys", ElementType::kFloat32, {}, {0.5f});
  const ValueId yz = b.constant<uint8_t>("yz", ElementType::kUInt8, {}, {3});
  const ValueId y = b.tensor("y", ElementType::kUInt8, {4, n});
  b.node("QLinearMatMul", {a, as, az, w, ws, wz, ys, yz}, {y});
  return b;
}

TEST(IntegerMatcher, QLinearMatMulBecomesAQdqGroup) {
  const ClaimSet set = match(qlinear_graph(true, {32, 8}));
  ASSERT_EQ(set.claims.size(), 1u);
  const Claim& claim = set.claims[0];
  EXPECT_EQ(claim.kind, ClaimKind::kQdqMatMul);
  EXPECT_EQ(claim.qdq.spec.x_zero_point, 128);
  ASSERT_TRUE(claim.qdq.spec.output.has_value());
  EXPECT_EQ(claim.qdq.spec.output->zero_point, 3);
  EXPECT_EQ(claim.qdq.spec.w_scales.size(), 8u);
}

TEST(IntegerMatcher, QLinearMatMulRefusals) {
  const ClaimSet runtime_scale = match(qlinear_graph(false, {32, 8}));
  ASSERT_EQ(runtime_scale.refusals.size(), 1u);
  EXPECT_EQ(runtime_scale.refusals[0].reason, "quant_params_not_constant");
  const ClaimSet batched = match(qlinear_graph(true, {2, 32, 8}));
  ASSERT_EQ(batched.refusals.size(), 1u);
  EXPECT_EQ(batched.refusals[0].reason, "weight_rank");
}

}  // namespace
}  // namespace npuflow
