// The host work a claim declares around its device GEMMs (graph/host_work.h): what `npuflow plan`
// prices on the board's A76 cores.
#include "graph/host_work.h"

#include <gtest/gtest.h>

#include <map>

namespace npuflow {
namespace {

Claim encoder_claim(int layers, int64_t rows, int64_t hidden, int64_t ffn, int64_t score_rows,
                    int64_t tokens) {
  Claim claim;
  claim.kind = ClaimKind::kVisionEncoder;
  for (int i = 0; i < layers; ++i) {
    const std::string p = "layer" + std::to_string(i) + ".";
    claim.work.push_back({p + "qkv", rows, hidden, 3 * hidden, ElementType::kFloat32, false});
    claim.work.push_back(
        {p + "scores", score_rows, hidden / 4, tokens, ElementType::kFloat32, true});
    claim.work.push_back(
        {p + "values", score_rows, tokens, hidden / 4, ElementType::kFloat32, true});
    claim.work.push_back({p + "o", rows, hidden, hidden, ElementType::kFloat32, false});
    claim.work.push_back({p + "fc1", rows, hidden, ffn, ElementType::kFloat32, false});
    claim.work.push_back({p + "fc2", rows, ffn, hidden, ElementType::kFloat32, false});
  }
  return claim;
}

TEST(HostWork, AnEncoderLayerHasNormsResidualsSoftmaxAndActivation) {
  const std::vector<HostWork> work = host_work_of(encoder_claim(2, 197, 768, 3072, 12 * 197, 197));
  ASSERT_EQ(work.size(), 8u);
  std::map<std::string, HostWork> by_name;
  for (const HostWork& w : work) by_name[w.name] = w;
  for (const char* layer : {"layer0.", "layer1."}) {
    const std::string p = layer;
    EXPECT_EQ(by_name[p + "norms"].kind, HostWorkKind::kNorm);
    EXPECT_EQ(by_name[p + "norms"].rows, 197);
    EXPECT_EQ(by_name[p + "norms"].width, 2 * 768);
    EXPECT_EQ(by_name[p + "residuals"].kind, HostWorkKind::kElementwise);
    EXPECT_EQ(by_name[p + "softmax"].kind, HostWorkKind::kSoftmax);
    EXPECT_EQ(by_name[p + "softmax"].rows, 12 * 197);
    EXPECT_EQ(by_name[p + "softmax"].width, 197);
    EXPECT_EQ(by_name[p + "activation"].kind, HostWorkKind::kActivation);
    EXPECT_EQ(by_name[p + "activation"].width, 3072);
  }
}

TEST(HostWork, SymbolicSizesStaySymbolic) {
  const std::vector<HostWork> work = host_work_of(encoder_claim(1, -1, 64, 128, -1, -1));
  for (const HostWork& w : work) {
    EXPECT_EQ(w.rows, -1) << w.name;
    if (w.kind == HostWorkKind::kSoftmax) {
      EXPECT_EQ(w.width, -1);
    }
  }
}

TEST(HostWork, AnIntegerGemmQuantizesAFloatInputAndAlwaysRunsItsEpilogue) {
  Claim qdq;
  qdq.kind = ClaimKind::kQdqMatMul;
  qdq.work.push_back({"mm", 32, 1024, 512, ElementType::kInt8, false});
  std::vector<HostWork> work = host_work_of(qdq);
  ASSERT_EQ(work.size(), 1u);  // int8 in: the epilogue only
  EXPECT_EQ(work[0].kind, HostWorkKind::kConvert);
  EXPECT_EQ(work[0].width, 512);
  qdq.qdq.activation_dequantized = true;  // a float input is quantized first
  work = host_work_of(qdq);
  ASSERT_EQ(work.size(), 2u);
  EXPECT_EQ(work[0].width, 1024);
  EXPECT_EQ(work[0].rows, 32);

  Claim dynamic;
  dynamic.kind = ClaimKind::kIntegerMatMul;
  dynamic.work = qdq.work;
  EXPECT_EQ(host_work_of(dynamic).size(), 1u);
  dynamic.integer.quantize_inside = true;
  EXPECT_EQ(host_work_of(dynamic).size(), 2u);
  Claim as_int8 = dynamic;
  as_int8.kind = ClaimKind::kFloatMatMul;
  as_int8.integer.quantize_inside = false;
  as_int8.integer.quantize_rows = true;
  EXPECT_EQ(host_work_of(as_int8).size(), 2u);
}

TEST(HostWork, NoGemmNoHostWork) {
  Claim empty;
  empty.kind = ClaimKind::kQdqMatMul;
  EXPECT_TRUE(host_work_of(empty).empty());
  Claim program;
  program.kind = ClaimKind::kTensorProgram;
  program.work.push_back({"mm", 4, 32, 32, ElementType::kFloat32, false});
  EXPECT_TRUE(host_work_of(program).empty());
}

}  // namespace
}  // namespace npuflow
