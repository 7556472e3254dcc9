// How encoders are claimed in a quantized graph (the `quant` knob), and how their claims share it
// with the integer MatMul groups.
//   fp16 (default): encoders are matched on the graph's float reading (graph/quantized_view.h),
//     weights dequantized once and activation Q/DQ pairs dropped; an encoder claim takes its
//     Q/DQ nodes along, and the integer groups inside it give way.
//   w8a8: QDQ is matched as it is; every QDQ MatMul group stays a native int8 claim with the
//     exact epilogue, and an encoder that contains one gives way.
//   strict: as fp16, and an encoder candidate in a graph that holds Q/DQ nodes that is not
//     claimed fails session creation with the matcher's reason.
// In every mode a dynamic int8 linear (DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul) is
// read as a float MatMul, and an encoder that contains it runs it natively: the activation
// quantized as DynamicQuantizeLinear defines it, the int8 GEMM on the device, the exact epilogue.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "graph/claim.h"
#include "graph/encoder_matcher.h"
#include "graph/graph_view.h"
#include "graph/quantized_view.h"

namespace npuflow {

enum class QuantMode { kFp16, kW8A8, kStrict };

// The mode a `quant` knob value names ("fp16", "w8a8", "strict"); fp16 for anything else.
QuantMode quant_mode(const std::string& value);
// What an encoder claim in that mode reads through (graph/quantized_view.h).
QuantizedReading quantized_reading(QuantMode mode);

ClaimSet match_encoders_in_quantized_graph(const GraphView& graph, QuantMode mode,
                                           const EncoderMatcherOptions& options);

// Removes every claim of `qdq_groups` (w8a8: every encoder) that shares a node with the other
// side, then every claim of `integer_groups` inside a remaining encoder, each with a refusal that
// says why.
void resolve_encoder_overlaps(QuantMode mode, ClaimSet& encoders, ClaimSet& qdq_groups,
                              ClaimSet& integer_groups);

// strict: why session creation fails (an unclaimed encoder candidate of a graph with Q/DQ
// nodes) and the candidate's node, or nothing.
struct StrictQuantFailure {
  NodeId node = kNoNode;
  std::string reason;
};
std::optional<StrictQuantFailure> strict_quant_failure(const GraphView& graph, QuantMode mode,
                                                       const ClaimSet& encoders);

}  // namespace npuflow
