// Finds A8W8 QDQ MatMul groups: DQ(x) -> MatMul <- DQ(W) [-> Q(y)], as AMD Quark and
// onnxruntime.quantization.quantize_static emit them, in the ai.onnx or com.microsoft domain.
#pragma once

#include "graph/claim.h"
#include "graph/graph_view.h"

namespace npuflow {

struct QdqMatcherOptions {
  bool enabled = true;  // the `qdq` knob; when off every candidate is refused as disabled
};

ClaimSet match_qdq_matmuls(const GraphView& graph, const QdqMatcherOptions& options);

}  // namespace npuflow
