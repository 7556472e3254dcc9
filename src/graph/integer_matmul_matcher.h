// Finds the integer MatMul forms ONNX Runtime's quantization tools and the QOperator format emit:
//
// - dynamic int8, as onnxruntime.quantization.quantize_dynamic writes it:
//     DynamicQuantizeLinear(x) -> MatMulInteger(x_q, W, x_zp, W_zp) -> Cast(float)
//       -> Mul(., Mul(x_scale, W_scale)) [-> Add(bias)]
//   claimed as one integer_matmul node; its DynamicQuantizeLinear joins the group when the group
//   is its only reader, else it stays on the CPU EP and its outputs become the node's inputs;
// - MatMulInteger with constant zero points (int32 output), the chain above optional;
// - QLinearMatMul with constant scales and zero points: a qdq_matmul claim (the QDQ epilogue).
#pragma once

#include <optional>
#include <vector>

#include "graph/claim.h"
#include "graph/graph_view.h"

namespace npuflow {

struct IntegerMatcherOptions {
  bool enabled = true;  // the `qdq` knob, shared with the QDQ matcher
};

ClaimSet match_integer_matmuls(const GraphView& graph, const IntegerMatcherOptions& options);

// One dynamic int8 linear with a float output, as the matcher above claims it, by its nodes:
//   DynamicQuantizeLinear(input) -> MatMulInteger(., weight) -> Cast -> Mul(., Mul(x_scale,
//   w_scale)) = output
// The bias Add after it, if any, is not part of it. The DynamicQuantizeLinear may have other
// readers.
struct DynamicInt8Linear {
  NodeId quantize = kNoNode, matmul = kNoNode, cast = kNoNode, scale_product = kNoNode,
         scale_mul = kNoNode;
  ValueId input = kNoValue;   // the float activation the DynamicQuantizeLinear reads
  ValueId weight = kNoValue;  // constant K x N int8 or uint8
  ValueId output = kNoValue;  // the scale Mul's float output
  ElementType weight_type = ElementType::kInt8;
  int64_t k = 0, n = 0;
  std::vector<int32_t> w_zero_points;  // 1 or n, in the weight's type
  std::vector<float> w_scales;         // 1 or n
};
std::optional<DynamicInt8Linear> find_dynamic_int8_linear(const GraphView& graph,
                                                          NodeId matmul_integer);

}  // namespace npuflow
