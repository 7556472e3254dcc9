// Finds vision-transformer encoders by structure: a patch-embedding Conv, an optional class token
// and position embedding, an optional pre-encoder LayerNorm, then pre- or post-LN blocks along the
// residual stream (multi-head self-attention with the scale wherever the exporter put it, an MLP
// with erf/tanh GELU or quick-GELU, optional LayerScale), and the exits the rest of the graph
// reads (the stream or a LayerNorm of it). LayerNorm is matched as one op or decomposed, a linear
// as MatMul[+Add] or Gemm (also inside ORT's Reshape-Gemm-Reshape rewrite). Matching never looks
// at names. Whatever sits between claimed nodes and is not pure shape arithmetic refuses the claim.
#pragma once

#include "graph/claim.h"
#include "graph/graph_view.h"

namespace npuflow {

struct EncoderMatcherOptions {
  bool enabled = true;  // the `vision` knob
  int64_t heads = 0;    // the `heads` knob: 0 infers the head count from the graph
};

ClaimSet match_vision_encoders(const GraphView& graph, const EncoderMatcherOptions& options);

}  // namespace npuflow
