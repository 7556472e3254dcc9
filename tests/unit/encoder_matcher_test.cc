// The encoder matcher's driver on whole hand-built encoders: a pixel encoder from its patch
// embedding Conv and a BERT-style text encoder from its token embedding Gather.
#include "graph/encoder_matcher.h"

#include <gtest/gtest.h>

#include "encoder_test_graph.h"

namespace npuflow::encoder_test {
namespace {

constexpr int64_t kHidden = 8;

// How the class token reaches the Concat: the constant itself, or TorchScript's
// expand(batch, -1, -1) of it (Expand by Where(s == -1, 1, s) of s = [B, -1, -1]), and near
// misses of that target the fuzzer made: a batch of 0, the Where reading a constant, two rows.
enum class ClsForm {
  kConstant,
  kTorchScriptExpand,
  kExpandToNoImage,
  kExpandWhereOfAConstant,
  kExpandTwoRows
};

struct PixelSpec {
  int64_t heads = 2;
  ClsForm cls = ClsForm::kConstant;
  BlockSpec block;
  int64_t norm_gamma_count = 0;  // the exit LayerNorm's gamma size (0: hidden)
  bool channel_major = false;    // near miss: the grid reshaped to [1, P, D] without a Transpose
  // Near miss: no class token, the grid transposed to [P, 1, D] (perm [2, 0, 1]): the order of a
  // batch of 1, but the position embedding's Add broadcasts the stream to [P, P, D].
  bool tokens_before_batch = false;
};

ValueId class_token(TestGraph& g, ValueId pixels, int64_t d, ClsForm form) {
  const ValueId token = g.weight({1, 1, d});
  if (form == ClsForm::kConstant) return token;
  const auto i64 = ElementType::kInt64;
  const ValueId shape = g.op("Shape", {pixels}, {4}, {}, i64);
  const ValueId batch = g.op("Gather", {shape, g.i64_scalar(0)}, {}, {}, i64);
  const ValueId b1 = form == ClsForm::kExpandToNoImage
                         ? g.i64s({0})
                         : g.op("Unsqueeze", {batch, g.i64s({0})}, {1}, {}, i64);
  const ValueId rows = g.i64s({form == ClsForm::kExpandTwoRows ? 2 : -1});
  const ValueId cat = g.op("Concat", {b1, rows, g.i64s({-1})}, {3}, {{"axis", integer(0)}}, i64);
  const ValueId target = g.op("Reshape", {cat, g.i64s({-1})}, {3}, {}, i64);
  Attribute one;
  one.tensor = AttributeTensor::of_int64s({1}, {1});
  const ValueId ones =
      g.op("ConstantOfShape", {g.op("Shape", {target}, {1}, {}, i64)}, {3}, {{"value", one}}, i64);
  const ValueId minus = g.op("Mul", {ones, g.i64_scalar(-1)}, {3}, {}, i64);
  const ValueId keep = g.op("Equal", {target, minus}, {3}, {}, ElementType::kUInt8);
  const ValueId chosen = form == ClsForm::kExpandWhereOfAConstant ? g.i64s({0}) : target;
  const ValueId where = g.op("Where", {keep, ones, chosen}, {3}, {}, i64);
  const ValueId out = g.op("Expand", {token, where}, {-1, -1, d});
  return out;
}

// pixels [1,3,8,8] -> Conv 4x4/4 -> [1,D,2,2] -> Reshape [1,D,4] -> Transpose -> [1,4,D]
// -> Concat class token -> Add position embedding -> one block -> LayerNorm -> output.
void pixel_encoder(TestGraph& g, const PixelSpec& s) {
  const int64_t d = kHidden, t = 5;
  const ValueId pixels = g.input({1, 3, 8, 8}, ElementType::kFloat32, "pixels");
  const ValueId conv = g.op("Conv", {pixels, g.weight({d, 3, 4, 4}), g.weight({d})}, {1, d, 2, 2},
                            {{"kernel_shape", ints({4, 4})}, {"strides", ints({4, 4})}});
  if (s.tokens_before_batch) {
    const ValueId grid = g.op("Reshape", {conv, g.i64s({1, d, 4})}, {1, d, 4});
    const ValueId patches = g.op("Transpose", {grid}, {4, 1, d}, {{"perm", ints({2, 0, 1})}});
    const ValueId stream = g.op("Add", {patches, g.weight({1, 4, d})}, {4, 4, d});
    BlockSpec b = s.block;
    b.att.t = 4;
    b.att.d = d;
    b.att.heads = s.heads;
    g.output(layernorm(g, block(g, stream, b)));
    return;
  }
  const ValueId patches =
      s.channel_major ? g.op("Reshape", {conv, g.i64s({1, 4, d})}, {1, 4, d})
                      : g.op("Transpose", {g.op("Reshape", {conv, g.i64s({1, d, 4})}, {1, d, 4})},
                             {1, 4, d}, {{"perm", ints({0, 2, 1})}});
  const ValueId tokens = g.op("Concat", {class_token(g, pixels, d, s.cls), patches}, {1, t, d},
                              {{"axis", integer(1)}});
  const ValueId stream = g.op("Add", {tokens, g.weight({1, t, d})}, {1, t, d});
  BlockSpec b = s.block;
  b.att.t = t;
  b.att.d = d;
  b.att.heads = s.heads;
  NormSpec exit_norm;
  exit_norm.gamma_count = s.norm_gamma_count;
  g.output(layernorm(g, block(g, stream, b), exit_norm));
}

// The pixel encoder of `s` is refused, once, for `reason`.
void expect_pixel_refusal(const PixelSpec& s, const std::string& reason) {
  TestGraph g;
  pixel_encoder(g, s);
  ClaimSet set = match_vision_encoders(g.graph, {});
  EXPECT_TRUE(set.claims.empty());
  ASSERT_EQ(set.refusals.size(), 1u);
  EXPECT_EQ(set.refusals[0].reason, reason) << set.refusals[0].detail;
}

TEST(EncoderMatcher, ClaimsAOneLayerPixelEncoder) {
  TestGraph g;
  pixel_encoder(g, {});
  ClaimSet set = match_vision_encoders(g.graph, {});
  EXPECT_EQ(set.candidates, 1);
  ASSERT_EQ(set.claims.size(), 1u)
      << (set.refusals.empty() ? "" : set.refusals[0].reason + ": " + set.refusals[0].detail);
  const VisionEncoderClaim& enc = set.claims[0].encoder;
  EXPECT_EQ(enc.family, "vit");
  EXPECT_EQ(enc.layers.size(), 1u);
  EXPECT_EQ(enc.heads, 2);
  EXPECT_EQ(enc.hidden, kHidden);
  EXPECT_TRUE(enc.from_pixels);
  EXPECT_EQ(enc.input, "pixels");
  EXPECT_TRUE(enc.cls.present);
  EXPECT_EQ(enc.exit_norms.size(), 1u);
  EXPECT_EQ(enc.stride_h, 4);
  EXPECT_FALSE(set.claims[0].work.empty());
  EXPECT_EQ(set.claims[0].nodes.size(), g.graph.nodes.size());  // the graph is all encoder
}

TEST(EncoderMatcher, ClaimsAClassTokenExpandedOverTheBatch) {
  TestGraph g;
  PixelSpec s;
  s.cls = ClsForm::kTorchScriptExpand;
  pixel_encoder(g, s);
  ClaimSet set = match_vision_encoders(g.graph, {});
  ASSERT_EQ(set.claims.size(), 1u)
      << (set.refusals.empty() ? "" : set.refusals[0].reason + ": " + set.refusals[0].detail);
  const VisionEncoderClaim& enc = set.claims[0].encoder;
  EXPECT_TRUE(enc.cls.runtime.empty());  // read as the constant itself, for every image
  EXPECT_FALSE(enc.cls.constant.empty());
}

// Fuzzer finds (seed 794785144, mutants 9267 and 1756): a class token Expand whose target empties
// it (ONNX Runtime then concatenates a row it never wrote) or does not evaluate as a batch
// broadcast; and one that repeats its row.
TEST(EncoderMatcher, RefusesAClassTokenExpandThatIsNoBatchBroadcast) {
  for (ClsForm form :
       {ClsForm::kExpandToNoImage, ClsForm::kExpandWhereOfAConstant, ClsForm::kExpandTwoRows}) {
    SCOPED_TRACE(static_cast<int>(form));
    PixelSpec s;
    s.cls = form;
    expect_pixel_refusal(s, "class_token");
  }
}

TEST(EncoderMatcher, PixelEncoderFamilyFollowsLayerScale) {
  TestGraph g;
  PixelSpec s;
  s.heads = 4;
  s.block.layer_scale = true;
  pixel_encoder(g, s);
  ClaimSet set = match_vision_encoders(g.graph, {});
  ASSERT_EQ(set.claims.size(), 1u) << (set.refusals.empty() ? "" : set.refusals[0].detail);
  EXPECT_EQ(set.claims[0].encoder.family, "dinov2");
  EXPECT_EQ(set.claims[0].encoder.heads, 4);
}

TEST(EncoderMatcher, RefusesAOneElementExitLayerNormScale) {
  PixelSpec s;
  s.norm_gamma_count = 1;
  expect_pixel_refusal(s, "constant_shape");
}

TEST(EncoderMatcher, RefusesAPatchGridFlattenedChannelMajor) {
  PixelSpec s;
  s.channel_major = true;
  expect_pixel_refusal(s, "patch_embedding");
}

// A fuzzer find (seed 1165383531, mutant 600): SigLIP's patch Transpose perm set to [2, 0, 1]
// keeps the data order of a batch of 1, so only the replayed shape tells the claim is wrong.
TEST(EncoderMatcher, RefusesAPatchGridTransposedTokensBeforeBatch) {
  PixelSpec s;
  s.tokens_before_batch = true;
  expect_pixel_refusal(s, "patch_embedding");
}

TEST(EncoderMatcher, KnobDisablesTheMatcher) {
  TestGraph g;
  pixel_encoder(g, {});
  EncoderMatcherOptions off;
  off.enabled = false;
  ClaimSet set = match_vision_encoders(g.graph, off);
  EXPECT_TRUE(set.claims.empty());
  ASSERT_EQ(set.refusals.size(), 1u);
  EXPECT_EQ(set.refusals[0].reason, "disabled_by_knob");
}

struct TextSpec {
  bool token_types = false;  // a second token-embedding Gather (token type ids) feeds the stream
};

// ids [1,T] -> Gather(table) [+ Gather(type table, type ids)] + position embedding -> LayerNorm
// -> one post-LN block with a padding-mask bias -> output.
void text_encoder(TestGraph& g, const TextSpec& s) {
  const int64_t d = kHidden, t = 6;
  const ValueId ids = g.input({1, t}, ElementType::kInt64, "input_ids");
  ValueId emb = g.op("Gather", {g.weight({30, d}), ids}, {1, t, d}, {{"axis", integer(0)}});
  if (s.token_types) {
    const ValueId type_ids = g.input({1, t}, ElementType::kInt64, "token_type_ids");
    const ValueId types =
        g.op("Gather", {g.weight({2, d}), type_ids}, {1, t, d}, {{"axis", integer(0)}});
    emb = g.op("Add", {emb, types}, {1, t, d});
  }
  emb = g.op("Add", {emb, g.weight({1, t, d})}, {1, t, d});
  BlockSpec b;
  b.pre_norm = false;
  b.att.t = t;
  b.att.d = d;
  b.att.mask_bias = true;
  g.output(block(g, layernorm(g, emb), b));
}

TEST(EncoderMatcher, ClaimsATextEncoderAsBert) {
  TestGraph g;
  text_encoder(g, {});
  ClaimSet set = match_vision_encoders(g.graph, {});
  EXPECT_EQ(set.candidates, 1);
  ASSERT_EQ(set.claims.size(), 1u)
      << (set.refusals.empty() ? "" : set.refusals[0].reason + ": " + set.refusals[0].detail);
  const VisionEncoderClaim& enc = set.claims[0].encoder;
  EXPECT_EQ(enc.family, "bert");
  EXPECT_EQ(enc.layers.size(), 1u);
  EXPECT_EQ(enc.heads, 2);
  EXPECT_FALSE(enc.from_pixels);
  EXPECT_EQ(enc.layers[0].attention_bias, "mask");
  EXPECT_FALSE(enc.layers[0].pre_norm);
}

TEST(EncoderMatcher, TokenTypeGatherJoinsTheSameCandidate) {
  TestGraph g;
  text_encoder(g, {true});
  ClaimSet set = match_vision_encoders(g.graph, {});
  EXPECT_EQ(set.candidates, 1);
  ASSERT_EQ(set.claims.size(), 1u) << (set.refusals.empty() ? "" : set.refusals[0].detail);
  EXPECT_EQ(set.claims[0].encoder.family, "bert");
  EXPECT_TRUE(set.refusals.empty());
}

}  // namespace
}  // namespace npuflow::encoder_test
