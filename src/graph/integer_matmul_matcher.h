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

#include "graph/claim.h"
#include "graph/graph_view.h"

namespace npuflow {

struct IntegerMatcherOptions {
  bool enabled = true;  // the `qdq` knob, shared with the QDQ matcher
};

ClaimSet match_integer_matmuls(const GraphView& graph, const IntegerMatcherOptions& options);

}  // namespace npuflow
