// How encoders are claimed in a QDQ-quantized graph (the `quant` knob), and how their claims
// share it with the integer MatMul groups.
//   fp16 (default): encoders are matched on the graph's float reading (graph/quantized_view.h),
//     weights dequantized once and activation Q/DQ pairs dropped; an encoder claim takes its
//     Q/DQ nodes along, and the integer groups inside it give way.
//   w8a8: the graph is matched as it is; every QDQ MatMul group stays a native int8 claim with
//     the exact epilogue, and an encoder that contains one gives way.
//   strict: as fp16, and an encoder candidate in a graph that holds Q/DQ nodes that is not
//     claimed fails session creation with the matcher's reason.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "graph/claim.h"
#include "graph/encoder_matcher.h"
#include "graph/graph_view.h"

namespace npuflow {

enum class QuantMode { kFp16, kW8A8, kStrict };

// The mode a `quant` knob value names ("fp16", "w8a8", "strict"); fp16 for anything else.
QuantMode quant_mode(const std::string& value);

ClaimSet match_encoders_in_quantized_graph(const GraphView& graph, QuantMode mode,
                                           const EncoderMatcherOptions& options);

// Removes from `groups` (w8a8: from `encoders`) every claim that shares a node with the other
// side, each with a refusal that says why.
void resolve_encoder_overlaps(QuantMode mode, ClaimSet& encoders,
                              const std::vector<ClaimSet*>& groups);

// strict: why session creation fails (an unclaimed encoder candidate of a graph with Q/DQ
// nodes) and the candidate's node, or nothing.
struct StrictQuantFailure {
  NodeId node = kNoNode;
  std::string reason;
};
std::optional<StrictQuantFailure> strict_quant_failure(const GraphView& graph, QuantMode mode,
                                                       const ClaimSet& encoders);

}  // namespace npuflow
