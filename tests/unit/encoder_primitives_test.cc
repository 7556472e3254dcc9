// The encoder matcher's building blocks on hand-built graphs: the index replay tensor, the
// canonical graph queries, linear projections, LayerNorm, the MLP activation, and the check
// that every per-element constant has the elements the kernel reads.
#include <gtest/gtest.h>

#include <climits>

#include "encoder_test_graph.h"

namespace npuflow::encoder_test {
namespace {

using encoder::CanonicalGraph;
using encoder::Fail;
using encoder::IndexTensor;
using encoder::Matcher;
using encoder::ShapeEnv;
using encoder::Used;

const EncoderMatcherOptions kDefaults{};

// --- IndexTensor --------------------------------------------------------------------------

TEST(EncoderIndexTensor, ReshapeCopiesZerosAndInfersMinusOne) {
  IndexTensor t = IndexTensor::iota({2, 3, 4});
  ASSERT_TRUE(t.reshape({0, -1}));
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 12}));
  for (size_t i = 0; i < t.data.size(); ++i) EXPECT_EQ(t.data[i], static_cast<int32_t>(i));
  ASSERT_TRUE(t.reshape({0, 3, -1}));
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3, 4}));
}

TEST(EncoderIndexTensor, RefusesImpossibleReshapes) {
  IndexTensor t = IndexTensor::iota({2, 3, 4});
  EXPECT_FALSE(t.reshape({5, -1}));   // 24 is no multiple of 5
  EXPECT_FALSE(t.reshape({-1, -1}));  // two inferred dims
  EXPECT_FALSE(t.reshape({4, 4}));    // 16 elements, not 24
  EXPECT_FALSE(t.reshape({-2, 12}));
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3, 4}));  // unchanged by a refusal
}

TEST(EncoderIndexTensor, TransposeMovesData) {
  IndexTensor t = IndexTensor::iota({2, 3});
  ASSERT_TRUE(t.transpose({1, 0}));
  EXPECT_EQ(t.shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(t.data, (std::vector<int32_t>{0, 3, 1, 4, 2, 5}));
  EXPECT_FALSE(t.transpose({0}));     // wrong rank
  EXPECT_FALSE(t.transpose({0, 2}));  // axis out of range
}

TEST(EncoderIndexTensor, SelectKeepsOrDropsAnAxis) {
  IndexTensor t = IndexTensor::iota({2, 3});
  IndexTensor kept = t;
  ASSERT_TRUE(kept.select(1, 1, 2, false));
  EXPECT_EQ(kept.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(kept.data, (std::vector<int32_t>{1, 2, 4, 5}));
  IndexTensor dropped = t;
  ASSERT_TRUE(dropped.select(0, 1, 1, true));
  EXPECT_EQ(dropped.shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(dropped.data, (std::vector<int32_t>{3, 4, 5}));
  EXPECT_FALSE(IndexTensor(t).select(0, 0, 2, true));   // dropping needs one index
  EXPECT_FALSE(IndexTensor(t).select(1, 2, 2, false));  // past the end
  EXPECT_FALSE(IndexTensor(t).select(2, 0, 1, false));  // no such axis
}

// --- Canonical queries --------------------------------------------------------------------

// Concat(Unsqueeze(Gather(Shape(x), 0)), Unsqueeze(Gather(Shape(x), 1)), [2], [4]).
ValueId head_split_target(TestGraph& g, ValueId x) {
  const ValueId shape = g.op("Shape", {x}, {3}, {}, ElementType::kInt64);
  auto dim = [&](int64_t i) {
    const ValueId d = g.op("Gather", {shape, g.i64_scalar(i)}, {}, {}, ElementType::kInt64);
    return g.op("Unsqueeze", {d, g.i64s({0})}, {1}, {}, ElementType::kInt64);
  };
  return g.op("Concat", {dim(0), dim(1), g.i64s({2}), g.i64s({4})}, {4}, {{"axis", integer(0)}},
              ElementType::kInt64);
}

TEST(EncoderCanonical, ShapeChainOfStaticDimsEvaluates) {
  TestGraph g;
  const ValueId x = g.input({1, 6, 8});
  const ValueId target = head_split_target(g, x);
  CanonicalGraph c(g.graph);
  EXPECT_EQ(c.shape_values(target), (std::vector<int64_t>{1, 6, 2, 4}));
}

TEST(EncoderCanonical, ShapeChainCountsADynamicBatchAsOne) {
  TestGraph g;
  const ValueId x = g.input({-1, 6, 8});
  const ValueId target = head_split_target(g, x);
  CanonicalGraph c(g.graph);
  EXPECT_EQ(c.shape_values(target), (std::vector<int64_t>{1, 6, 2, 4}));
}

TEST(EncoderCanonical, ShapeEnvResolvesUnknownDims) {
  TestGraph g;
  const ValueId x = g.input({-1, -1, 8});
  const ValueId target = head_split_target(g, x);
  CanonicalGraph c(g.graph);
  EXPECT_EQ(c.shape_values(target), (std::vector<int64_t>{1, -1, 2, 4}));
  ShapeEnv env{{x, {3, 9, 8}}};
  EXPECT_EQ(c.shape_values(target, &env), (std::vector<int64_t>{3, 9, 2, 4}));
}

TEST(EncoderCanonical, SliceToInt64MaxTakesTheTail) {
  TestGraph g;
  const ValueId x = g.input({1, 6, 8});
  const ValueId shape = g.op("Shape", {x}, {3}, {}, ElementType::kInt64);
  const ValueId tail =
      g.op("Slice", {shape, g.i64s({1}), g.i64s({INT64_MAX})}, {2}, {}, ElementType::kInt64);
  const ValueId last =
      g.op("Slice", {shape, g.i64s({-1}), g.i64s({INT64_MAX})}, {1}, {}, ElementType::kInt64);
  CanonicalGraph c(g.graph);
  EXPECT_EQ(c.shape_values(tail), (std::vector<int64_t>{6, 8}));
  EXPECT_EQ(c.shape_values(last), (std::vector<int64_t>{8}));
}

TEST(EncoderCanonical, StaticShapeCompletedThroughTransposeAndReshape) {
  TestGraph g;
  const ValueId x = g.input({1, 6, 8});
  const ValueId transposed = g.op("Transpose", {x}, {}, {{"perm", ints({0, 2, 1})}});
  g.forget_shape(transposed);
  const ValueId reshaped = g.op("Reshape", {x, head_split_target(g, x)}, {});
  g.forget_shape(reshaped);
  // Partially known: the inferred -1 is filled from the producer.
  const ValueId partial = g.op("Transpose", {x}, {1, -1, 6}, {{"perm", ints({0, 2, 1})}});
  CanonicalGraph c(g.graph);
  EXPECT_EQ(c.static_shape(transposed), (std::vector<int64_t>{1, 8, 6}));
  EXPECT_EQ(c.static_shape(reshaped), (std::vector<int64_t>{1, 6, 2, 4}));
  EXPECT_EQ(c.static_shape(partial), (std::vector<int64_t>{1, 8, 6}));
}

TEST(EncoderCanonical, ThroughIdentitySeesConstantsOnly) {
  TestGraph g;
  const ValueId w = g.weight({4, 4}, "w");
  const ValueId ident = g.op("Identity", {w}, {4, 4});
  const ValueId cast = g.op("Cast", {ident}, {4, 4}, {{"to", integer(1)}});
  const ValueId to_int = g.op("Cast", {w}, {4, 4}, {{"to", integer(7)}}, ElementType::kInt64);
  const ValueId x = g.input({4, 4});
  const ValueId runtime = g.op("Identity", {x}, {4, 4});
  CanonicalGraph c(g.graph);
  EXPECT_EQ(c.through_identity(ident), w);
  EXPECT_EQ(c.through_identity(cast), w);
  EXPECT_EQ(c.name(cast), "w");
  EXPECT_TRUE(c.float_vector(cast, 16));
  EXPECT_FALSE(c.is_noop_cast(g.producer(to_int)));
  EXPECT_EQ(c.through_identity(to_int), to_int);
  EXPECT_EQ(c.through_identity(runtime), runtime);  // a runtime value keeps its own name
}

TEST(EncoderCanonical, ScalarThroughSqrtReciprocalDivMul) {
  TestGraph g;
  const ValueId root = g.op("Sqrt", {g.scalar(16.0f)}, {});
  const ValueId inv = g.op("Reciprocal", {root}, {});
  const ValueId product = g.op("Mul", {inv, g.scalar(3.0f)}, {});
  const ValueId quotient = g.op("Div", {g.scalar(1.0f), product}, {});
  const ValueId runtime = g.op("Sqrt", {g.input({})}, {});
  CanonicalGraph c(g.graph);
  Used used;
  EXPECT_FLOAT_EQ(*c.scalar(root, used), 4.0f);
  EXPECT_FLOAT_EQ(*c.scalar(product, used), 0.75f);
  used.clear();
  EXPECT_FLOAT_EQ(*c.scalar(quotient, used), 1.0f / 0.75f);
  EXPECT_EQ(used.size(), 4u);  // Sqrt, Reciprocal, Mul, Div
  EXPECT_FALSE(c.scalar(runtime, used).has_value());
  EXPECT_FALSE(c.scalar(g.weight({2}), used).has_value());  // two elements: no scalar
}

TEST(EncoderCanonical, ScaleFromTheHeadDimOfAShape) {
  TestGraph g;
  const ValueId q = g.input({1, 2, 6, 4});
  const ValueId shape = g.op("Shape", {q}, {4}, {}, ElementType::kInt64);
  const ValueId dh =
      g.op("Slice", {shape, g.i64s({-1}), g.i64s({INT64_MAX})}, {1}, {}, ElementType::kInt64);
  const ValueId dh_float = g.op("Cast", {dh}, {1}, {{"to", integer(1)}});
  const ValueId root = g.op("Sqrt", {dh_float}, {1});
  const ValueId scale = g.op("Div", {g.scalar(1.0f), root}, {1});
  CanonicalGraph c(g.graph);
  Used used;
  ASSERT_TRUE(c.scalar(scale, used).has_value());
  EXPECT_FLOAT_EQ(*c.scalar(scale, used), 0.5f);
}

// --- Linear projections -------------------------------------------------------------------

struct LinearProbe {
  std::optional<encoder::Linear> lin;
  Used used;
};
LinearProbe probe_linear(const TestGraph& g, ValueId y, bool allow_reshaped_output = false) {
  Matcher m(g.graph, kDefaults);
  LinearProbe p;
  p.lin = m.linear(y, p.used, allow_reshaped_output);
  return p;
}

TEST(EncoderLinear, MatMulAlone) {
  TestGraph g;
  const ValueId x = g.input({1, 6, 8});
  const ValueId y = linear(g, x, 8, 12, LinearForm::kMatMul);
  auto p = probe_linear(g, y);
  ASSERT_TRUE(p.lin);
  EXPECT_EQ(p.lin->x, x);
  EXPECT_EQ(p.lin->k, 8);
  EXPECT_EQ(p.lin->n, 12);
  EXPECT_EQ(p.lin->ref.weight, g.name(g.graph.node(g.producer(y)).input(1)));
  EXPECT_TRUE(p.lin->ref.bias.empty());
  EXPECT_EQ(p.used.size(), 1u);
}

TEST(EncoderLinear, MatMulAddWithTheBiasOnEitherSide) {
  for (LinearForm form : {LinearForm::kMatMulAdd, LinearForm::kBiasFirst}) {
    TestGraph g;
    const ValueId x = g.input({1, 6, 8});
    const ValueId y = linear(g, x, 8, 12, form);
    auto p = probe_linear(g, y);
    ASSERT_TRUE(p.lin);
    EXPECT_EQ(p.lin->x, x);
    EXPECT_EQ(p.lin->n, 12);
    EXPECT_FALSE(p.lin->ref.bias.empty());
    EXPECT_EQ(p.used.size(), 2u);
  }
}

TEST(EncoderLinear, RefusesABiasOfTheWrongLength) {
  TestGraph g;
  const ValueId x = g.input({1, 6, 8});
  const ValueId mm = linear(g, x, 8, 12, LinearForm::kMatMul);
  const ValueId good = g.op("Add", {mm, g.weight({12})}, {1, 6, 12});
  ASSERT_TRUE(probe_linear(g, good).lin);
  TestGraph bad;
  const ValueId bx = bad.input({1, 6, 8});
  const ValueId bmm = linear(bad, bx, 8, 12, LinearForm::kMatMul);
  const ValueId y = bad.op("Add", {bmm, bad.weight({1})}, {1, 6, 12});
  EXPECT_FALSE(probe_linear(bad, y).lin);
}

TEST(EncoderLinear, RefusesANonConstantWeight) {
  TestGraph g;
  const ValueId x = g.input({1, 6, 8});
  const ValueId y = linear(g, x, 8, 12, LinearForm::kMatMul);
  ASSERT_TRUE(probe_linear(g, y).lin);
  g.graph.values[static_cast<size_t>(g.graph.node(g.producer(y)).input(1))].constant.reset();
  EXPECT_FALSE(probe_linear(g, y).lin);
}

TEST(EncoderLinear, RefusesA3DWeight) {
  TestGraph g;
  const ValueId x = g.input({1, 6, 8});
  const ValueId y = g.op("MatMul", {x, g.weight({1, 8, 12})}, {1, 6, 12});
  EXPECT_FALSE(probe_linear(g, y).lin);
}

// Gemm on [rows, k]: `w_shape` [k, n] or [n, k] with transB.
ValueId gemm(TestGraph& g, ValueId x, std::vector<int64_t> w_shape, int64_t n, Attrs attrs = {}) {
  return g.op("Gemm", {x, g.weight(std::move(w_shape)), g.weight({n})}, {g.info(x).shape[0], n},
              std::move(attrs));
}

TEST(EncoderLinear, GemmWithAndWithoutTransB) {
  TestGraph g;
  const ValueId x = g.input({6, 8});
  const ValueId plain = gemm(g, x, {8, 12}, 12, {{"transB", integer(0)}});
  const ValueId transposed = gemm(g, x, {12, 8}, 12, {{"transB", integer(1)}});
  auto p = probe_linear(g, plain), t = probe_linear(g, transposed);
  ASSERT_TRUE(p.lin);
  ASSERT_TRUE(t.lin);
  EXPECT_FALSE(p.lin->ref.transposed);
  EXPECT_TRUE(t.lin->ref.transposed);
  for (const auto* lin : {&*p.lin, &*t.lin}) {
    EXPECT_EQ(lin->x, x);
    EXPECT_EQ(lin->k, 8);
    EXPECT_EQ(lin->n, 12);
    EXPECT_FALSE(lin->ref.bias.empty());
  }
}

TEST(EncoderLinear, RefusesGemmAlphaOrBetaOtherThanOne) {
  TestGraph g;
  const ValueId x = g.input({6, 8});
  const ValueId ones = gemm(g, x, {8, 12}, 12, {{"alpha", real(1.0f)}, {"beta", real(1.0f)}});
  const ValueId alpha = gemm(g, x, {8, 12}, 12, {{"alpha", real(2.0f)}});
  const ValueId beta = gemm(g, x, {8, 12}, 12, {{"beta", real(0.5f)}});
  EXPECT_TRUE(probe_linear(g, ones).lin);
  EXPECT_FALSE(probe_linear(g, alpha).lin);
  EXPECT_FALSE(probe_linear(g, beta).lin);
}

TEST(EncoderLinear, OrtReshapeGemmReshape) {
  TestGraph g;
  const ValueId x = g.input({1, 6, 8});
  const ValueId y = linear(g, x, 8, 12, LinearForm::kOrtReshapeGemm);
  auto p = probe_linear(g, y);
  ASSERT_TRUE(p.lin);
  EXPECT_EQ(p.lin->x, x);
  EXPECT_EQ(p.lin->k, 8);
  EXPECT_EQ(p.lin->n, 12);
  EXPECT_NE(p.lin->flatten, kNoNode);
  EXPECT_EQ(p.lin->reshaped_output, kNoNode);
  EXPECT_EQ(p.used.size(), 3u);  // Reshape, Gemm, Reshape
}

TEST(EncoderLinear, OrtGemmReshapedToOneHeadIsALayoutOp) {
  TestGraph g;
  const ValueId x = g.input({1, 6, 8});
  const ValueId flat = g.op("Reshape", {x, g.i64s({-1, 8})}, {6, 8});
  const ValueId mm = gemm(g, flat, {8, 8}, 8);
  const ValueId y = g.op("Reshape", {mm, g.i64s({1, 6, 1, 8})}, {1, 6, 1, 8});
  EXPECT_FALSE(probe_linear(g, y).lin);  // not a linear by itself
  auto p = probe_linear(g, y, true);
  ASSERT_TRUE(p.lin);
  EXPECT_EQ(p.lin->x, x);
  EXPECT_EQ(p.lin->reshaped_output, g.producer(y));
}

// --- LayerNorm ----------------------------------------------------------------------------

std::optional<encoder::Norm> probe_norm(const TestGraph& g, ValueId y) {
  Matcher m(g.graph, kDefaults);
  Used used;
  return m.layernorm(y, used);
}

TEST(EncoderLayerNorm, OpOverTheLastAxis) {
  for (int64_t axis : {-1, 2}) {
    TestGraph g;
    const ValueId x = g.input({1, 6, 8});
    NormSpec s;
    s.axis = axis;
    const ValueId y = layernorm(g, x, s);
    auto n = probe_norm(g, y);
    ASSERT_TRUE(n) << axis;
    EXPECT_EQ(n->x, x);
    EXPECT_FALSE(n->ref.gamma.empty());
    EXPECT_FALSE(n->ref.beta.empty());
    EXPECT_FLOAT_EQ(n->ref.epsilon, 1e-6f);
  }
}

TEST(EncoderLayerNorm, RefusesTheOpOverAnotherAxis) {
  TestGraph g;
  const ValueId x = g.input({1, 6, 8});
  NormSpec s;
  s.axis = 1;
  EXPECT_FALSE(probe_norm(g, layernorm(g, x, s)));
}

TEST(EncoderLayerNorm, Decomposed) {
  struct Case {
    NormForm form;
    bool beta;
    bool eps_identity;
  };
  for (Case c : {Case{NormForm::kPow, true, false}, Case{NormForm::kMulSquare, true, false},
                 Case{NormForm::kPow, false, false}, Case{NormForm::kMulSquare, false, true}}) {
    TestGraph g;
    const ValueId x = g.input({1, 6, 8});
    NormSpec s;
    s.form = c.form;
    s.beta = c.beta;
    s.eps_identity = c.eps_identity;
    const ValueId y = layernorm(g, x, s);
    auto n = probe_norm(g, y);
    ASSERT_TRUE(n) << static_cast<int>(c.form) << c.beta << c.eps_identity;
    EXPECT_EQ(n->x, x);
    EXPECT_EQ(n->ref.beta.empty(), !c.beta);
    EXPECT_FLOAT_EQ(n->ref.epsilon, 1e-12f);
  }
}

TEST(EncoderLayerNorm, RefusesDecomposedNearMisses) {
  auto claimed = [](NormSpec s) {
    TestGraph g;
    const ValueId x = g.input({1, 6, 8});
    s.form = NormForm::kPow;
    return probe_norm(g, layernorm(g, x, s)).has_value();
  };
  ASSERT_TRUE(claimed({}));
  NormSpec variance_axis;
  variance_axis.axis = 1;
  EXPECT_FALSE(claimed(variance_axis));
  NormSpec mean_axis;
  mean_axis.mean_axis = 1;
  EXPECT_FALSE(claimed(mean_axis));
  NormSpec cube;
  cube.exponent = 3.0f;
  EXPECT_FALSE(claimed(cube));
}

// --- MLP activation -----------------------------------------------------------------------

struct ActivationProbe {
  std::optional<EncoderActivation> kind;
  ValueId u = kNoValue, fc1 = kNoValue;
  Fail why;
};
ActivationProbe probe_activation(Act act) {
  TestGraph g;
  const ValueId x = g.input({1, 6, 8});
  ActivationProbe p;
  p.fc1 = linear(g, x, 8, 32);
  const ValueId z = activation(g, p.fc1, act);
  Matcher m(g.graph, kDefaults);
  Used used;
  p.kind = m.activation(z, p.u, used, p.why);
  return p;
}

TEST(EncoderActivation, IdentifiesEachGeluForm) {
  const std::pair<Act, EncoderActivation> cases[] = {
      {Act::kErfDiv, EncoderActivation::kGeluErf},
      {Act::kErfMulFirst, EncoderActivation::kGeluErf},
      {Act::kGeluOp, EncoderActivation::kGeluErf},
      {Act::kGeluTanhOp, EncoderActivation::kGeluTanh},
      {Act::kFastGelu, EncoderActivation::kGeluTanh},
      {Act::kQuickGelu, EncoderActivation::kQuickGelu},
  };
  for (auto [act, want] : cases) {
    auto p = probe_activation(act);
    ASSERT_TRUE(p.kind) << static_cast<int>(act) << ": " << p.why.detail;
    EXPECT_EQ(*p.kind, want) << static_cast<int>(act);
    EXPECT_EQ(p.u, p.fc1);
  }
}

TEST(EncoderActivation, RefusesNonGelus) {
  for (Act act : {Act::kTanhInsteadOfErf, Act::kClip, Act::kRelu}) {
    auto p = probe_activation(act);
    EXPECT_FALSE(p.kind) << static_cast<int>(act);
    EXPECT_EQ(p.why.reason, "unsupported_activation") << static_cast<int>(act);
  }
}

// --- constants_fit ------------------------------------------------------------------------

// The constants one layer of a claim names, with the sizes the kernel reads (d = 8).
struct FitGraph {
  TestGraph g;
  VisionEncoderClaim enc;
  FitGraph() {
    const int64_t d = 8;
    enc.hidden = d;
    enc.from_pixels = true;
    EncoderLayerRef layer;
    layer.norm1 = {g.name(g.weight({d})), g.name(g.weight({d})), 1e-6f};
    layer.norm2 = {g.name(g.weight({d})), g.name(g.weight({d})), 1e-6f};
    for (DenseRef* dense : {&layer.q, &layer.k, &layer.v, &layer.o})
      *dense = {g.name(g.weight({d, d})), false, g.name(g.weight({d}))};
    enc.layers.push_back(layer);
    enc.patch_bias = g.name(g.weight({d}));
    enc.pos.present = true;
    enc.pos.constant = g.name(g.weight({1, 5, d}));
  }
  Fail fit(int64_t tokens = 5) {
    Matcher m(g.graph, kDefaults);
    Fail why;
    if (m.constants_fit(enc, tokens, why)) why.reason = "fits";
    return why;
  }
};

TEST(EncoderConstantsFit, AcceptsExactSizes) {
  FitGraph f;
  EXPECT_EQ(f.fit().reason, "fits");
}

TEST(EncoderConstantsFit, RefusesOneElementLayerNormParameters) {
  FitGraph gamma;
  gamma.enc.layers[0].norm1.gamma = gamma.g.name(gamma.g.weight({1}));
  EXPECT_EQ(gamma.fit().reason, "constant_shape");
  FitGraph beta;
  beta.enc.layers[0].norm2.beta = beta.g.name(beta.g.weight({1}));
  EXPECT_EQ(beta.fit().reason, "constant_shape");
}

TEST(EncoderConstantsFit, RefusesAOneElementBias) {
  FitGraph f;
  f.enc.layers[0].o.bias = f.g.name(f.g.weight({1}));
  EXPECT_EQ(f.fit().reason, "constant_shape");
}

TEST(EncoderConstantsFit, RefusesABroadcastPositionEmbedding) {
  FitGraph f;
  f.enc.pos.constant = f.g.name(f.g.weight({1, 1, 8}));
  EXPECT_EQ(f.fit().reason, "constant_shape");
}

TEST(EncoderConstantsFit, GatheredPositionRowsMustExist) {
  FitGraph in_range;
  in_range.enc.pos.constant = in_range.g.name(in_range.g.weight({16, 8}));
  in_range.enc.pos.gather_indices = in_range.g.name(in_range.g.i64s({0, 1, 2, 3, 15}));
  EXPECT_EQ(in_range.fit().reason, "fits");
  FitGraph past_end;
  past_end.enc.pos.constant = past_end.g.name(past_end.g.weight({16, 8}));
  past_end.enc.pos.gather_indices = past_end.g.name(past_end.g.i64s({0, 1, 2, 3, 16}));
  EXPECT_EQ(past_end.fit().reason, "constant_shape");
}

}  // namespace
}  // namespace npuflow::encoder_test
