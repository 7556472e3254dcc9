// ModernBERT's pieces on hand-built graphs: rotary embeddings on q and k after a fused head
// split (Reshape [B,T,3,H,dh], Transpose, Slice + Squeeze), a gated MLP (GeGLU), and a pre-LN
// block whose attention reads the stream itself; with the one-change near misses refused.
#include <gtest/gtest.h>

#include "encoder_test_graph.h"

namespace npuflow::encoder_test {
namespace {

using encoder::Fail;
using encoder::Matcher;
using encoder::Used;

enum class Rotation {
  kRotateHalf,     // x cos + cat(-x2, x1) sin: the accepted form
  kNone,           // no rotation at all
  kSwappedHalves,  // near miss: cat(-x1, x2)
  kQuarterSplit,   // near miss: halves split at dh/4
  kOnlyQ,          // near miss: k is not rotated
  kOtherKTables,   // near miss: k rotated by other tables than q
  kPerHeadTable,   // near miss: tables [1, H, T, dh] (one per head)
  // ORT's transpose optimizer's form: x * cos computed as [B, T, H, dh] (a transposed table)
  // and transposed back, rotate_half(x) * sin in place.
  kMixedLayouts,
  kMixedPerHead,  // near miss: the same with a different cos table per head
};

struct RopeSpec {
  int64_t t = 6, d = 16, heads = 2;
  Rotation rotation = Rotation::kRotateHalf;
  bool runtime_tables = false;  // cos and sin are graph inputs, not constants
  bool mask_bias = false;
};

struct RopeGraph {
  ValueId out = kNoValue, cos = kNoValue, sin = kNoValue;
};

// One out-of-line body for the table's entries, so the graph's data and a test's expectation
// are the same arithmetic: inlined, a compiler may fuse the multiply-add at one site and not at
// the other (aarch64 GCC does), and cos turns that rounding into ~60 ulps.
[[gnu::noinline]] float table_entry(size_t i, float phase) {
  return std::cos(0.37f * static_cast<float>(i) + phase);
}

ValueId table(TestGraph& g, const RopeSpec& s, float phase, bool per_head = false) {
  const int64_t dh = s.d / s.heads, h = per_head ? s.heads : 1;
  std::vector<float> data(static_cast<size_t>(h * s.t * dh));
  for (size_t i = 0; i < data.size(); ++i) data[i] = table_entry(i, phase);
  if (s.runtime_tables) return g.input({1, h, s.t, dh});
  return g.floats({1, h, s.t, dh}, data);
}

ValueId rotate(TestGraph& g, ValueId x, ValueId cos, ValueId sin, const RopeSpec& s) {
  const std::vector<int64_t> shape = g.info(x).shape;
  const int64_t dh = shape.back();
  const int64_t cut = s.rotation == Rotation::kQuarterSplit ? dh / 4 : dh / 2;
  std::vector<int64_t> lo_shape = shape, hi_shape = shape;
  lo_shape.back() = cut;
  hi_shape.back() = dh - cut;
  const ValueId lo = g.op("Slice", {x, g.i64s({0}), g.i64s({cut}), g.i64s({-1})}, lo_shape);
  const ValueId hi = g.op("Slice", {x, g.i64s({cut}), g.i64s({INT64_MAX}), g.i64s({-1})}, hi_shape);
  const bool swapped = s.rotation == Rotation::kSwappedHalves;
  const ValueId neg = g.op("Neg", {swapped ? lo : hi}, swapped ? lo_shape : hi_shape);
  const ValueId cat = g.op("Concat", {neg, swapped ? hi : lo}, shape, {{"axis", integer(-1)}});
  const ValueId b = g.op("Mul", {cat, sin}, shape);
  if (s.rotation == Rotation::kMixedLayouts || s.rotation == Rotation::kMixedPerHead) {
    // cos as [1, T, 1 or H, dh]: the canonical table transposed.
    const int64_t h = shape[1], t = shape[2];
    const int64_t tables = s.rotation == Rotation::kMixedPerHead ? h : 1;
    const std::vector<int64_t> bthd = {1, t, h, dh};
    const auto* canonical = static_cast<const float*>(g.info(cos).constant->data);
    std::vector<float> data(static_cast<size_t>(t * tables * dh));
    for (int64_t tt = 0; tt < t; ++tt)
      for (int64_t hh = 0; hh < tables; ++hh)
        for (int64_t c = 0; c < dh; ++c)
          data[static_cast<size_t>((tt * tables + hh) * dh + c)] =
              canonical[tt * dh + c] + 0.01f * static_cast<float>(hh);
    const ValueId cos_t = g.floats({1, t, tables, dh}, data);
    const ValueId x_t = g.op("Transpose", {x}, bthd, {{"perm", ints({0, 2, 1, 3})}});
    const ValueId a_t = g.op("Mul", {x_t, cos_t}, bthd);
    const ValueId a = g.op("Transpose", {a_t}, shape, {{"perm", ints({0, 2, 1, 3})}});
    return g.op("Add", {a, b}, shape);
  }
  const ValueId a = g.op("Mul", {x, cos}, shape);
  return g.op("Add", {a, b}, shape);
}

RopeGraph rope_attention(TestGraph& g, ValueId x, const RopeSpec& s) {
  RopeGraph out;
  const int64_t t = s.t, d = s.d, h = s.heads, dh = d / h;
  const ValueId qkv = linear(g, x, d, 3 * d, LinearForm::kMatMul);
  const ValueId r = g.op("Reshape", {qkv, g.i64s({1, t, 3, h, dh})}, {1, t, 3, h, dh});
  const ValueId tr = g.op("Transpose", {r}, {1, h, 3, t, dh}, {{"perm", ints({0, 3, 2, 1, 4})}});
  ValueId parts[3];
  for (int i = 0; i < 3; ++i) {
    const ValueId sl =
        g.op("Slice", {tr, g.i64s({i}), g.i64s({i + 1}), g.i64s({2})}, {1, h, 1, t, dh});
    parts[i] = g.op("Squeeze", {sl, g.i64s({2})}, {1, h, t, dh});
  }
  ValueId q = parts[0], k = parts[1];
  if (s.rotation != Rotation::kNone) {
    const bool per_head = s.rotation == Rotation::kPerHeadTable;
    out.cos = table(g, s, 0.0f, per_head);
    out.sin = table(g, s, 1.0f, per_head);
    q = rotate(g, q, out.cos, out.sin, s);
    if (s.rotation == Rotation::kOtherKTables)
      k = rotate(g, k, table(g, s, 2.0f), table(g, s, 3.0f), s);
    else if (s.rotation != Rotation::kOnlyQ)
      k = rotate(g, k, out.cos, out.sin, s);
  }
  const ValueId kt = g.op("Transpose", {k}, {1, h, dh, t}, {{"perm", ints({0, 1, 3, 2})}});
  ValueId scores = g.op("MatMul", {q, kt}, {1, h, t, t});
  scores = g.op("Mul", {scores, g.scalar(1.0f / std::sqrt(static_cast<float>(dh)))}, {1, h, t, t});
  if (s.mask_bias) scores = g.op("Add", {scores, g.input({1, 1, t, t})}, {1, h, t, t});
  const ValueId probs = g.op("Softmax", {scores}, {1, h, t, t}, {{"axis", integer(-1)}});
  const ValueId ctx = g.op("MatMul", {probs, parts[2]}, {1, h, t, dh});
  const ValueId merged = g.op("Transpose", {ctx}, {1, t, h, dh}, {{"perm", ints({0, 2, 1, 3})}});
  const ValueId flat = g.op("Reshape", {merged, g.i64s({1, -1, d})}, {1, t, d});
  out.out = linear(g, flat, d, d, LinearForm::kMatMul);
  return out;
}

struct RopeProbe {
  std::optional<encoder::Attention> att;
  Fail why;
  RopeGraph built;
};

RopeProbe probe(const RopeSpec& s) {
  TestGraph g;
  const ValueId x = g.input({1, s.t, s.d});
  RopeProbe p;
  p.built = rope_attention(g, x, s);
  const EncoderMatcherOptions options;
  Matcher m(g.graph, options);
  Used used;
  auto o = m.linear(p.built.out, used);
  if (!o) return p;
  p.att = m.attention(*o, s.t, used, p.why);
  return p;
}

TEST(EncoderRotary, RotateHalfOnQAndKAfterAFusedSliceSqueezeSplit) {
  for (int64_t heads : {1, 2, 4}) {
    RopeSpec s;
    s.heads = heads;
    auto p = probe(s);
    ASSERT_TRUE(p.att) << heads << " heads: " << p.why.reason << ": " << p.why.detail;
    EXPECT_EQ(p.att->heads, heads);
    EXPECT_TRUE(p.att->fused);
    EXPECT_EQ(p.att->rope_cos, p.built.cos);
    EXPECT_EQ(p.att->rope_sin, p.built.sin);
    EXPECT_TRUE(p.att->rope_perm.empty());
  }
}

TEST(EncoderRotary, MixedLayoutsAreProbedAndTheTablesReadOff) {
  RopeSpec s;
  s.rotation = Rotation::kMixedLayouts;
  auto p = probe(s);
  ASSERT_TRUE(p.att) << p.why.reason << ": " << p.why.detail;
  // The tables come as [T, dh] data read off the region, equal to the graph's canonical ones.
  EXPECT_EQ(p.att->rope_cos, kNoValue);
  const int64_t dh = s.d / s.heads;
  ASSERT_EQ(p.att->rope_cos_values.size(), static_cast<size_t>(s.t * dh));
  ASSERT_EQ(p.att->rope_sin_values.size(), static_cast<size_t>(s.t * dh));
  for (size_t i = 0; i < p.att->rope_cos_values.size(); ++i) {
    EXPECT_FLOAT_EQ(p.att->rope_cos_values[i], table_entry(i, 0.0f));
    EXPECT_FLOAT_EQ(p.att->rope_sin_values[i], table_entry(i, 1.0f));
  }
}

TEST(EncoderRotary, RuntimeTablesAndAMaskBias) {
  RopeSpec s;
  s.runtime_tables = true;
  s.mask_bias = true;
  auto p = probe(s);
  ASSERT_TRUE(p.att) << p.why.reason << ": " << p.why.detail;
  EXPECT_EQ(p.att->rope_cos, p.built.cos);
  EXPECT_NE(p.att->bias, kNoValue);
}

TEST(EncoderRotary, NoRotationLeavesNoTables) {
  RopeSpec s;
  s.rotation = Rotation::kNone;
  auto p = probe(s);
  ASSERT_TRUE(p.att) << p.why.reason << ": " << p.why.detail;
  EXPECT_EQ(p.att->rope_cos, kNoValue);
}

TEST(EncoderRotary, RefusesNearMisses) {
  const std::pair<Rotation, const char*> cases[] = {
      {Rotation::kSwappedHalves, "rotary_halves"}, {Rotation::kQuarterSplit, "rotary_halves"},
      {Rotation::kOnlyQ, "rotary_layout"},         {Rotation::kOtherKTables, "rotary_layout"},
      {Rotation::kPerHeadTable, "rotary_table"},   {Rotation::kMixedPerHead, "rotary_layout"},
  };
  for (const auto& [rotation, reason] : cases) {
    RopeSpec s;
    s.rotation = rotation;
    auto p = probe(s);
    EXPECT_FALSE(p.att) << "claimed near miss " << static_cast<int>(rotation);
    EXPECT_EQ(p.why.reason, reason) << static_cast<int>(rotation) << ": " << p.why.detail;
  }
}

// --- The gated MLP and the block ----------------------------------------------------------
enum class Gate {
  kSplitActFirst,   // Split in two; act(first) * second (ModernBERT)
  kSlicesActFirst,  // the same with two Slices
  kActSecond,       // act(second) * first
  kSameHalfTwice,   // near miss: act(first) * first
  kNone,            // an ungated MLP
};

struct ModernBlockSpec {
  RopeSpec att;
  Gate gate = Gate::kSplitActFirst;
  bool attention_norm = false;  // ModernBERT's first layer has none
  int64_t inner = 24;
};

ValueId modern_block(TestGraph& g, ValueId h, const ModernBlockSpec& s) {
  const std::vector<int64_t> shape = g.info(h).shape;
  const int64_t d = s.att.d, inner = s.inner;
  NormSpec no_beta;
  no_beta.beta = false;
  const ValueId att_in = s.attention_norm ? layernorm(g, h, no_beta) : h;
  const ValueId h1 = g.op("Add", {h, rope_attention(g, att_in, s.att).out}, shape);
  const ValueId ln = layernorm(g, h1, no_beta);
  std::vector<int64_t> half_shape = shape;
  half_shape.back() = inner;
  ValueId mlp_in;
  if (s.gate == Gate::kNone) {
    const ValueId fc1 = linear(g, ln, d, inner, LinearForm::kMatMul);
    mlp_in = g.op("Gelu", {fc1}, half_shape);
  } else {
    const ValueId fc1 = linear(g, ln, d, 2 * inner, LinearForm::kMatMul);
    ValueId first, second;
    if (s.gate == Gate::kSlicesActFirst) {
      first = g.op("Slice", {fc1, g.i64s({0}), g.i64s({inner}), g.i64s({-1})}, half_shape);
      second = g.op("Slice", {fc1, g.i64s({inner}), g.i64s({2 * inner}), g.i64s({-1})}, half_shape);
    } else {
      first = g.value(half_shape);
      second = g.value(half_shape);
      g.node("Split", {fc1}, {first, second}, {{"axis", integer(-1)}});
    }
    const ValueId activated =
        g.op("Gelu", {s.gate == Gate::kActSecond ? second : first}, half_shape);
    const ValueId gate = s.gate == Gate::kActSecond       ? first
                         : s.gate == Gate::kSameHalfTwice ? first
                                                          : second;
    mlp_in = g.op("Mul", {activated, gate}, half_shape);
  }
  const ValueId fc2 = linear(g, mlp_in, inner, d, LinearForm::kMatMul);
  return g.op("Add", {h1, fc2}, shape);
}

struct ModernProbe {
  std::optional<ValueId> next;
  ValueId built = kNoValue;
  EncoderLayerRef layer;
  Fail why;
};

ModernProbe probe_block(const ModernBlockSpec& s) {
  TestGraph g;
  const ValueId h = g.input({1, s.att.t, s.att.d});
  ModernProbe p;
  p.built = modern_block(g, h, s);
  const EncoderMatcherOptions options;
  Matcher m(g.graph, options);
  Used used;
  p.next = m.block(h, s.att.t, p.layer, used, p.why);
  return p;
}

TEST(EncoderModernBlock, PreLnWithoutAttentionNormAndGeGlu) {
  for (Gate gate : {Gate::kSplitActFirst, Gate::kSlicesActFirst}) {
    ModernBlockSpec s;
    s.gate = gate;
    auto p = probe_block(s);
    ASSERT_TRUE(p.next) << p.why.reason << ": " << p.why.detail;
    EXPECT_EQ(*p.next, p.built);
    EXPECT_TRUE(p.layer.pre_norm);
    EXPECT_FALSE(p.layer.attention_norm);
    EXPECT_EQ(p.layer.glu, EncoderGlu::kActFirst);
    EXPECT_EQ(p.layer.activation, EncoderActivation::kGeluErf);
    EXPECT_TRUE(p.layer.rope_cos.present);
    EXPECT_FALSE(p.layer.rope_cos.constant.empty());
    EXPECT_TRUE(p.layer.norm1.gamma.empty());
    EXPECT_TRUE(p.layer.norm2.beta.empty());
  }
}

TEST(EncoderModernBlock, AttentionNormAndTheSecondHalfActivated) {
  ModernBlockSpec s;
  s.attention_norm = true;
  s.gate = Gate::kActSecond;
  auto p = probe_block(s);
  ASSERT_TRUE(p.next) << p.why.reason << ": " << p.why.detail;
  EXPECT_TRUE(p.layer.attention_norm);
  EXPECT_FALSE(p.layer.norm1.gamma.empty());
  EXPECT_EQ(p.layer.glu, EncoderGlu::kActSecond);
}

TEST(EncoderModernBlock, UngatedMlpStaysUngated) {
  ModernBlockSpec s;
  s.gate = Gate::kNone;
  auto p = probe_block(s);
  ASSERT_TRUE(p.next) << p.why.reason << ": " << p.why.detail;
  EXPECT_EQ(p.layer.glu, EncoderGlu::kNone);
}

TEST(EncoderModernBlock, RefusesAGateThatReadsOneHalfTwice) {
  ModernBlockSpec s;
  s.gate = Gate::kSameHalfTwice;
  auto p = probe_block(s);
  EXPECT_FALSE(p.next);
  EXPECT_EQ(p.why.reason, "unsupported_activation") << p.why.detail;
}

}  // namespace
}  // namespace npuflow::encoder_test
