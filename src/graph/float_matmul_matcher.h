// The opt-in float MatMul claim (NPUFLOW_FLOAT_MATMUL=int8, seed 004): a float MatMul with a
// constant 2-D weight, left by every other matcher, taken as an int8 GEMM whose weight is
// quantized once per output column and whose activation is quantized per row at run time. Lossy
// by design (the gate is 2% relative error against the fp32 MatMul), so never on by default.
#pragma once

#include <set>

#include "graph/claim.h"
#include "graph/graph_view.h"

namespace npuflow {

// `taken`: nodes other claims hold; they are not candidates.
ClaimSet match_float_matmuls(const GraphView& graph, const std::set<NodeId>& taken);

}  // namespace npuflow
