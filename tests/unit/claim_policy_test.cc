// Do-no-harm claiming: which policy a session gets, and what claim=faster keeps and declines from
// a measured cost table (and that nothing is kept without one).
#include "route/claim_policy.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace npuflow {
namespace {

Claim encoder_claim(int64_t tokens, int64_t hidden) {
  Claim claim;
  claim.kind = ClaimKind::kVisionEncoder;
  claim.anchor_name = "encoder";
  claim.encoder.hidden = hidden;
  claim.work.push_back({"layer0.qkv", tokens, hidden, 3 * hidden, ElementType::kFloat32, false});
  claim.work.push_back(
      {"layer0.scores", 12 * tokens, hidden / 12, tokens, ElementType::kFloat32, true});
  claim.work.push_back(
      {"layer0.values", 12 * tokens, tokens, hidden / 12, ElementType::kFloat32, true});
  return claim;
}

double flops_of(const Claim& claim) {
  double f = 0;
  for (const GemmWork& g : claim.work) f += 2.0 * g.rows * g.k * g.n;
  return f;
}

// A table with one fast short-sequence model and one slow long-sequence model.
CostTable table() {
  CostTable t;
  t.path = "/test/costs.json";
  MeasuredCost short_seq;
  short_seq.kind = "vision_encoder";
  short_seq.model = "ViT-B/16";
  short_seq.tokens = 197;
  short_seq.hidden = 768;
  short_seq.flops = flops_of(encoder_claim(197, 768));
  short_seq.npuflow_ms = 100.0;
  short_seq.cpu_ep_ms = 120.0;
  MeasuredCost long_seq = short_seq;
  long_seq.model = "Depth Anything V2 S";
  long_seq.tokens = 1370;
  long_seq.hidden = 384;
  long_seq.flops = flops_of(encoder_claim(1370, 384));
  long_seq.npuflow_ms = 300.0;
  long_seq.cpu_ep_ms = 200.0;
  t.rows = {short_seq, long_seq};
  return t;
}

TEST(ClaimPolicy, AutoIsFasterOnlyWhenAutoFellBackToTheHost) {
  EXPECT_EQ(resolve_claim_policy("auto", "auto", "host"), ClaimPolicy::kFaster);
  EXPECT_EQ(resolve_claim_policy("auto", "host", "host"), ClaimPolicy::kAll);
  EXPECT_EQ(resolve_claim_policy("auto", "sim", "sim"), ClaimPolicy::kAll);
  EXPECT_EQ(resolve_claim_policy("all", "auto", "host"), ClaimPolicy::kAll);
  EXPECT_EQ(resolve_claim_policy("faster", "sim", "sim"), ClaimPolicy::kFaster);
}

TEST(ClaimPolicy, GgmlAutoIsFasterOnTheHostDeviceWhicheverWayItWasChosen) {
  // The ggml backend's peer is the CPU backend, already on this host: explicit host is judged too.
  EXPECT_EQ(resolve_ggml_claim_policy("auto", "host"), ClaimPolicy::kFaster);
  EXPECT_EQ(resolve_ggml_claim_policy("auto", "sim"), ClaimPolicy::kAll);
  EXPECT_EQ(resolve_ggml_claim_policy("all", "host"), ClaimPolicy::kAll);
  EXPECT_EQ(resolve_ggml_claim_policy("faster", "host"), ClaimPolicy::kFaster);
  EXPECT_EQ(resolve_ggml_claim_policy("faster", "sim"), ClaimPolicy::kFaster);
}

TEST(ClaimPolicy, FasterKeepsWhatIsMeasuredFasterAndDeclinesTheRestWithBothCosts) {
  const CostTable costs = table();
  ClaimSet set;
  set.claims = {encoder_claim(196, 768), encoder_claim(1370, 384)};
  set.claims[1].anchor_name = "depth";
  apply_claim_policy(set, ClaimPolicy::kFaster, &costs, costs.path);
  ASSERT_EQ(set.claims.size(), 1u);
  EXPECT_EQ(set.claims[0].anchor_name, "encoder");
  ASSERT_EQ(set.refusals.size(), 1u);
  EXPECT_EQ(set.refusals[0].node_name, "depth");
  EXPECT_EQ(set.refusals[0].reason, "slower_than_cpu_ep");
  // Both costs, scaled to the claim (the same shape as the measured model: the measured figures).
  EXPECT_NE(set.refusals[0].detail.find("npuflow host 300.0 ms vs CPU EP 200.0 ms"),
            std::string::npos)
      << set.refusals[0].detail;
  EXPECT_NE(set.refusals[0].detail.find("Depth Anything V2 S"), std::string::npos);
}

TEST(ClaimPolicy, CostsScaleWithTheClaimsWork) {
  const CostTable costs = table();
  const Claim bigger = encoder_claim(394, 768);  // twice the tokens of the nearest measured
  const ClaimVerdict verdict = judge_claim(bigger, &costs, costs.path);
  EXPECT_TRUE(verdict.keep);
  const double scale = flops_of(bigger) / costs.rows[0].flops;
  EXPECT_NEAR(verdict.npuflow_ms, 100.0 * scale, 1e-9);
  EXPECT_NEAR(verdict.cpu_ep_ms, 120.0 * scale, 1e-9);
}

TEST(ClaimPolicy, RowsOfTheSameShapeGoToTheClaimsFamily) {
  CostTable costs = table();
  costs.rows[0].family = "vit";  // 197 x 768, slower than the CPU EP
  costs.rows[0].npuflow_ms = 130.0;
  MeasuredCost clip = costs.rows[0];
  clip.family = "clip";  // the same shape, faster
  clip.model = "CLIP-B/16";
  clip.npuflow_ms = 100.0;
  costs.rows.push_back(clip);
  Claim claim = encoder_claim(197, 768);
  claim.encoder.family = "clip";
  EXPECT_TRUE(judge_claim(claim, &costs, costs.path).keep);
  claim.encoder.family = "vit";
  EXPECT_FALSE(judge_claim(claim, &costs, costs.path).keep);
}

TEST(ClaimPolicy, NothingMeasuredMeansDeclinedUnderFasterAndKeptUnderAll) {
  ClaimSet set;
  set.claims = {encoder_claim(197, 768)};
  ClaimSet all = set;
  apply_claim_policy(all, ClaimPolicy::kAll, nullptr, "/nowhere.json");
  EXPECT_EQ(all.claims.size(), 1u);
  apply_claim_policy(set, ClaimPolicy::kFaster, nullptr, "/nowhere.json");
  EXPECT_TRUE(set.claims.empty());
  ASSERT_EQ(set.refusals.size(), 1u);
  EXPECT_EQ(set.refusals[0].reason, "no_measured_cost");
  // A table with only another kind measured does not stand in for this one.
  CostTable qdq_only;
  qdq_only.rows.push_back({"qdq_matmul", "layer", "", 0, 0, 32, 896, 896, 1e6, 1.0, 2.0});
  EXPECT_FALSE(judge_claim(encoder_claim(197, 768), &qdq_only, "t").keep);
}

TEST(ClaimPolicy, AQuantizedEncoderIsJudgedOnlyByQuantizedEncoders) {
  // The float ViT row says npuflow is faster at this shape; it says nothing of the same encoder
  // with dynamic int8 linears inside.
  const CostTable floats = table();
  Claim quantized = encoder_claim(197, 768);
  quantized.encoder.dequantized = true;
  quantized.encoder.quant_form = "dynamic_int8";
  ASSERT_TRUE(judge_claim(encoder_claim(197, 768), &floats, floats.path).keep);
  const ClaimVerdict unmeasured = judge_claim(quantized, &floats, floats.path);
  EXPECT_FALSE(unmeasured.keep);
  EXPECT_EQ(unmeasured.reason, "no_measured_cost");
  EXPECT_NE(unmeasured.detail.find("quantized_encoder (dynamic_int8)"), std::string::npos)
      << unmeasured.detail;
  CostTable measured = floats;
  MeasuredCost row = floats.rows[0];
  row.kind = "quantized_encoder";
  row.model = "MiniLM-q";
  row.npuflow_ms = 30.0;
  row.cpu_ep_ms = 29.0;
  // A QDQ encoder measured at the shape does not vouch for a dynamic one: the CPU EP runs the
  // forms at different speeds.
  row.form = "qdq";
  measured.rows.push_back(row);
  EXPECT_EQ(judge_claim(quantized, &measured, measured.path).reason, "no_measured_cost");
  measured.rows.back().form = "dynamic_int8";
  const ClaimVerdict slower = judge_claim(quantized, &measured, measured.path);
  EXPECT_FALSE(slower.keep);
  EXPECT_EQ(slower.reason, "slower_than_cpu_ep");
  EXPECT_NE(slower.detail.find("MiniLM-q"), std::string::npos) << slower.detail;
  measured.rows.back().npuflow_ms = 25.0;
  EXPECT_TRUE(judge_claim(quantized, &measured, measured.path).keep);
  // The same shape measured again, slower (another activation type of the same form): the least
  // favourable row decides, whichever comes first.
  MeasuredCost slower_form = measured.rows.back();
  slower_form.model = "MiniLM-q, uint8 activations";
  slower_form.npuflow_ms = 40.0;
  measured.rows.push_back(slower_form);
  const ClaimVerdict pessimistic = judge_claim(quantized, &measured, measured.path);
  EXPECT_FALSE(pessimistic.keep);
  EXPECT_NE(pessimistic.detail.find("uint8 activations"), std::string::npos) << pessimistic.detail;
  std::swap(measured.rows[measured.rows.size() - 1], measured.rows[measured.rows.size() - 2]);
  EXPECT_FALSE(judge_claim(quantized, &measured, measured.path).keep);
}

TEST(ClaimPolicy, IntegerGroupsAreJudgedByMeasuredIntegerGroups) {
  Claim group;
  group.kind = ClaimKind::kIntegerMatMul;
  group.anchor_name = "proj";
  group.work.push_back({"proj", 64, 384, 1536, ElementType::kInt8, false});
  CostTable costs = table();  // encoders only: no integer group measured
  EXPECT_EQ(judge_claim(group, &costs, costs.path).reason, "no_measured_cost");
  costs.rows.push_back({"integer_matmul", "MiniLM-q fc1", "", 0, 0, 64, 384, 1536, 1e6, 2.0, 1.0});
  EXPECT_EQ(judge_claim(group, &costs, costs.path).reason, "slower_than_cpu_ep");
  costs.rows.back().npuflow_ms = 0.5;
  EXPECT_TRUE(judge_claim(group, &costs, costs.path).keep);
}

TEST(ClaimPolicy, TableFileRoundTrip) {
  const std::string path = testing::TempDir() + "/claim-costs-test.json";
  {
    std::ofstream out(path);
    out << R"({"machine":"x86_64-avx2","rows":[{"kind":"vision_encoder","model":"ViT-B/16",)"
        << R"("tokens":197,"hidden":768,"flops":3.5e10,"npuflow_ms":90,"cpu_ep_ms":100},)"
        << R"({"kind":"vision_encoder","model":"broken","tokens":1,"hidden":1,"flops":0,)"
        << R"("npuflow_ms":1,"cpu_ep_ms":1}]})";
  }
  auto loaded = load_cost_table(path);
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded.value().machine, "x86_64-avx2");
  ASSERT_EQ(loaded.value().rows.size(), 1u);  // a row without work is dropped
  EXPECT_EQ(loaded.value().rows[0].tokens, 197);
  EXPECT_FALSE(load_cost_table(path + ".missing").is_ok());
  std::remove(path.c_str());
}

TEST(ClaimPolicy, MachineSignatureNamesTheArchitecture) {
  const std::string sig = machine_signature();
  EXPECT_FALSE(sig.empty());
  EXPECT_NE(default_cost_table_path().find("claim-costs-" + sig + ".json"), std::string::npos);
}

}  // namespace
}  // namespace npuflow
