// Multi-head attention and whole blocks on hand-built graphs: every head-split and scale form
// the matcher proves by index replay, and the one-change near misses it must refuse.
#include <gtest/gtest.h>

#include "encoder_test_graph.h"

namespace npuflow::encoder_test {
namespace {

using encoder::Fail;
using encoder::Matcher;
using encoder::Used;

struct AttentionProbe {
  std::optional<encoder::Attention> att;
  Fail why;
  AttentionGraph built;
  ValueId x = kNoValue;
};

AttentionProbe probe_attention(const AttentionSpec& s, EncoderMatcherOptions options = {}) {
  TestGraph g;
  AttentionProbe p;
  p.x = g.input({s.dynamic_batch ? -1 : 1, s.t, s.d});
  p.built = attention(g, p.x, s);
  Matcher m(g.graph, options);
  Used used;
  auto o = m.linear(p.built.out, used);
  if (!o) {
    p.why = {"test_setup", "the output projection is no linear"};
    return p;
  }
  p.att = m.attention(*o, s.t, used, p.why);
  return p;
}

void expect_attention(const AttentionSpec& s, int64_t heads, bool fused,
                      EncoderMatcherOptions options = {}) {
  auto p = probe_attention(s, options);
  ASSERT_TRUE(p.att) << p.why.reason << ": " << p.why.detail;
  EXPECT_EQ(p.att->x, p.x);
  EXPECT_EQ(p.att->d, s.d);
  EXPECT_EQ(p.att->heads, heads);
  EXPECT_EQ(p.att->fused, fused);
  EXPECT_NEAR(p.att->scale, s.scale == ScalePlace::kNone ? 1.0f : p.built.scale, 1e-6f);
  if (fused) {
    EXPECT_EQ(p.att->q.col_begin, 0);
    EXPECT_EQ(p.att->k.col_begin, s.d);
    EXPECT_EQ(p.att->v.col_begin, 2 * s.d);
    EXPECT_EQ(p.att->q.cols, s.d);
    EXPECT_EQ(p.att->q.weight, p.att->v.weight);
  } else {
    EXPECT_NE(p.att->q.weight, p.att->k.weight);
  }
}

void expect_refused(const AttentionSpec& s, const std::string& reason,
                    EncoderMatcherOptions options = {}) {
  auto p = probe_attention(s, options);
  EXPECT_FALSE(p.att) << "claimed a near miss; wanted " << reason;
  EXPECT_EQ(p.why.reason, reason) << p.why.detail;
}

TEST(EncoderAttention, SeparateProjectionsWithAStaticHeadSplit) {
  expect_attention({}, 2, false);
}

TEST(EncoderAttention, HeadSplitByADynamicShapeChain) {
  AttentionSpec s;
  s.split = HeadSplit::kShapeChain;
  expect_attention(s, 2, false);
  s.dynamic_batch = true;
  expect_attention(s, 2, false);
}

TEST(EncoderAttention, HeadSplitTargetsWithZeroAndMinusOne) {
  for (std::vector<int64_t> target :
       {std::vector<int64_t>{0, 0, -1, 4}, std::vector<int64_t>{1, -1, 2, 4},
        std::vector<int64_t>{0, 6, 2, -1}}) {
    AttentionSpec s;
    s.split_target = target;
    SCOPED_TRACE(::testing::PrintToString(target));
    expect_attention(s, 2, false);
  }
}

TEST(EncoderAttention, OrtReshapeGemmProjections) {
  AttentionSpec s;
  s.projection = LinearForm::kOrtReshapeGemm;
  expect_attention(s, 2, false);
  s.split = HeadSplit::kFusedSplit;
  expect_attention(s, 2, true);
}

TEST(EncoderAttention, EveryScalePlacement) {
  for (ScalePlace place : {ScalePlace::kScoresMul, ScalePlace::kScoresDiv, ScalePlace::kQOnly,
                           ScalePlace::kSqrtBoth, ScalePlace::kNone}) {
    AttentionSpec s;
    s.scale = place;
    SCOPED_TRACE(static_cast<int>(place));
    expect_attention(s, 2, false);
  }
}

TEST(EncoderAttention, HeadCountProvenByReplay) {
  for (int64_t heads : {1, 2, 4}) {
    AttentionSpec s;
    s.heads = heads;
    SCOPED_TRACE(heads);
    expect_attention(s, heads, false);
  }
}

TEST(EncoderAttention, HeadsKnob) {
  AttentionSpec s;
  s.heads = 4;
  EncoderMatcherOptions knob;
  knob.heads = 4;
  auto p = probe_attention(s, knob);
  ASSERT_TRUE(p.att) << p.why.detail;
  EXPECT_EQ(p.att->heads, 4);
  EXPECT_EQ(p.att->heads_source, "knob");
  EXPECT_EQ(probe_attention(s).att->heads_source, "graph");
  // A knob the graph's layout contradicts, and one that does not divide the hidden size.
  knob.heads = 2;
  expect_refused(s, "attention_layout", knob);
  knob.heads = 3;
  expect_refused(s, "heads_unknown", knob);
}

TEST(EncoderAttention, FusedQkvBySplitSlicesOrGather) {
  for (HeadSplit split :
       {HeadSplit::kFusedSplit, HeadSplit::kFusedSlices, HeadSplit::kFusedReshape5}) {
    AttentionSpec s;
    s.split = split;
    SCOPED_TRACE(static_cast<int>(split));
    expect_attention(s, 2, true);
  }
}

TEST(EncoderAttention, RefusesSwappedFusedBlocks) {
  for (HeadSplit split :
       {HeadSplit::kFusedSplit, HeadSplit::kFusedSlices, HeadSplit::kFusedReshape5}) {
    AttentionSpec s;
    s.split = split;
    s.swap_fused = true;
    SCOPED_TRACE(static_cast<int>(split));
    expect_refused(s, "fused_qkv_order");
  }
}

TEST(EncoderAttention, PaddingMaskBiasAndNanGuard) {
  AttentionSpec s;
  s.mask_bias = true;
  s.nan_guard = true;
  auto p = probe_attention(s);
  ASSERT_TRUE(p.att) << p.why.detail;
  EXPECT_EQ(p.att->bias, p.built.mask);
  EXPECT_TRUE(p.att->nan_to_zero);
  EXPECT_EQ(p.att->heads, 2);
  s.nan_guard = false;
  auto plain = probe_attention(s);
  ASSERT_TRUE(plain.att);
  EXPECT_FALSE(plain.att->nan_to_zero);
  EXPECT_EQ(probe_attention({}).att->bias, kNoValue);
}

TEST(EncoderAttention, RefusesHeadsMergedWithoutTheTranspose) {
  AttentionSpec s;
  s.merge_untransposed = true;
  expect_refused(s, "attention_layout");
}

TEST(EncoderAttention, HeadsMergedByAShapeChain) {
  AttentionSpec s;
  s.merge_by_shape_chain = true;
  expect_attention(s, 2, false);
}

// A fuzzer find (seed 794785144, mutant 4206): the merge target's Concat with B and T swapped
// keeps the data order of a batch of 1, but the branch comes out [T, 1, D] and the CPU EP
// broadcasts the residual add to [T, T, D]; no shape was inferred to tell, the replay's does.
TEST(EncoderAttention, RefusesHeadsMergedToTokensBatchHidden) {
  AttentionSpec s;
  s.merge_by_shape_chain = true;
  s.merge_chain_swapped = true;
  expect_refused(s, "attention_layout");
}

TEST(EncoderAttention, RefusesVSplitWithItsDimsSwapped) {
  AttentionSpec s;
  s.v_split_transposed = true;
  expect_refused(s, "attention_layout");
}

TEST(EncoderAttention, RefusesFusedSlicesStraddlingTwoBlocks) {
  AttentionSpec s;
  s.split = HeadSplit::kFusedSlices;
  s.fused_starts = {0, 4, 16};  // k reads columns [4, 12): half of q's block, half of k's
  expect_refused(s, "fused_qkv_split");
}

TEST(EncoderAttention, RefusesANanGuardFillingOtherThanZero) {
  AttentionSpec s;
  s.nan_guard = true;
  s.nan_fill = 1.0f;
  expect_refused(s, "attention_shape");
}

TEST(EncoderAttention, RefusesScoresScaledByATensor) {
  AttentionSpec s;
  s.scale_by_tensor = true;
  expect_refused(s, "attention_mask");
}

TEST(EncoderAttention, InferenceDropoutAndCastOnTheProbabilities) {
  AttentionSpec s;
  s.eval_dropout = true;
  expect_attention(s, 2, false);
  s.nan_guard = true;
  expect_attention(s, 2, false);
}

TEST(EncoderAttention, AllZeroConstantMaskIsNoBias) {
  for (bool where : {false, true}) {
    AttentionSpec s;
    s.constant_mask = true;
    s.constant_mask_value = 0.0f;
    s.constant_mask_where = where;
    SCOPED_TRACE(where);
    expect_attention(s, 2, false);
    EXPECT_EQ(probe_attention(s).att->bias, kNoValue);
  }
}

TEST(EncoderAttention, RefusesANonZeroConstantAdditiveMask) {
  AttentionSpec s;
  s.constant_mask = true;
  expect_refused(s, "attention_mask");
}

// A non-zero mask computed by a node (even from constants) is a value the fused node receives.
TEST(EncoderAttention, ComputedNonZeroMaskIsARuntimeBias) {
  AttentionSpec s;
  s.constant_mask = true;
  s.constant_mask_where = true;
  auto p = probe_attention(s);
  ASSERT_TRUE(p.att) << p.why.detail;
  EXPECT_EQ(p.att->bias, p.built.mask);
}

TEST(EncoderAttention, RefusesSoftmaxOverAnotherAxis) {
  AttentionSpec s;
  s.softmax_axis = 2;
  expect_refused(s, "attention_shape");
}

TEST(EncoderAttention, RefusesKNotTransposed) {
  AttentionSpec s;
  s.k_untransposed = true;
  expect_refused(s, "attention_layout");
}

TEST(EncoderAttention, RefusesQkvReadingDifferentTensors) {
  AttentionSpec s;
  s.v_reads_other = true;
  expect_refused(s, "attention_inputs");
}

// --- Blocks -------------------------------------------------------------------------------

struct BlockProbe {
  std::optional<ValueId> next;
  ValueId built_next = kNoValue;
  EncoderLayerRef layer;
  Fail why;
};

BlockProbe probe_block(const BlockSpec& s) {
  TestGraph g;
  const ValueId h = g.input({1, s.att.t, s.att.d});
  BlockProbe p;
  p.built_next = block(g, h, s);
  const EncoderMatcherOptions options;  // the Matcher keeps a reference to it
  Matcher m(g.graph, options);
  Used used;
  p.next = m.block(h, s.att.t, p.layer, used, p.why);
  return p;
}

TEST(EncoderBlock, PreLn) {
  auto p = probe_block({});
  ASSERT_TRUE(p.next) << p.why.reason << ": " << p.why.detail;
  EXPECT_EQ(*p.next, p.built_next);
  EXPECT_TRUE(p.layer.pre_norm);
  EXPECT_TRUE(p.layer.layer_scale1.empty());
  EXPECT_EQ(p.layer.activation, EncoderActivation::kGeluErf);
  EXPECT_FALSE(p.layer.fc1.weight.empty());
}

TEST(EncoderBlock, PostLn) {
  BlockSpec s;
  s.pre_norm = false;
  auto p = probe_block(s);
  ASSERT_TRUE(p.next) << p.why.reason << ": " << p.why.detail;
  EXPECT_EQ(*p.next, p.built_next);
  EXPECT_FALSE(p.layer.pre_norm);
  EXPECT_FALSE(p.layer.norm2.gamma.empty());
}

TEST(EncoderBlock, LayerScaleAndQuickGelu) {
  BlockSpec s;
  s.layer_scale = true;
  s.act = Act::kQuickGelu;
  auto p = probe_block(s);
  ASSERT_TRUE(p.next) << p.why.reason << ": " << p.why.detail;
  EXPECT_FALSE(p.layer.layer_scale1.empty());
  EXPECT_FALSE(p.layer.layer_scale2.empty());
  EXPECT_EQ(p.layer.activation, EncoderActivation::kQuickGelu);
}

TEST(EncoderBlock, RefusesAnMlpNotReadingTheStream) {
  BlockSpec s;
  s.mlp_norm_reads_block_input = true;
  auto p = probe_block(s);
  EXPECT_FALSE(p.next);
  EXPECT_EQ(p.why.reason, "block_shape");
}

TEST(EncoderBlock, RefusesAnMlpResidualThatSkipsTheAttention) {
  BlockSpec s;
  s.mlp_residual_skips_attention = true;
  auto p = probe_block(s);
  EXPECT_FALSE(p.next);
  EXPECT_EQ(p.why.reason, "block_shape");
}

}  // namespace
}  // namespace npuflow::encoder_test
