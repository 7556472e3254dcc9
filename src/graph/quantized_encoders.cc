#include "graph/quantized_encoders.h"

#include <algorithm>
#include <set>

#include "core/strings.h"
#include "graph/quant_params.h"
#include "graph/quantized_view.h"

namespace npuflow {
namespace {

bool overlaps(const Claim& claim, const std::set<NodeId>& nodes) {
  return std::any_of(claim.nodes.begin(), claim.nodes.end(),
                     [&](NodeId id) { return nodes.count(id) > 0; });
}

std::set<NodeId> nodes_of(const ClaimSet& set) {
  std::set<NodeId> nodes;
  for (const Claim& claim : set.claims) nodes.insert(claim.nodes.begin(), claim.nodes.end());
  return nodes;
}

// q, k and v run as one projection: all three dynamic int8 (one quantization of their shared
// input) or none. Why not, or "".
std::string mixed_dynamic_projection(const DequantizedView& view,
                                     const VisionEncoderClaim& encoder) {
  for (size_t i = 0; i < encoder.layers.size(); ++i) {
    const EncoderLayerRef& layer = encoder.layers[i];
    int dynamic = 0;
    for (const DenseRef* part : {&layer.q, &layer.k, &layer.v})
      dynamic += view.dynamic_weight(part->weight) != nullptr;
    if (dynamic != 0 && dynamic != 3) {
      return str_cat("layer ", i, ": ", dynamic,
                     " of q, k and v are dynamic int8 linears, the rest float");
    }
  }
  return {};
}

bool has_dynamic_projection(const DequantizedView& view, const VisionEncoderClaim& encoder) {
  for (const EncoderLayerRef& layer : encoder.layers) {
    for (const DenseRef* part : {&layer.q, &layer.k, &layer.v, &layer.o, &layer.fc1, &layer.fc2})
      if (view.dynamic_weight(part->weight) != nullptr) return true;
  }
  return false;
}

}  // namespace

QuantMode quant_mode(const std::string& value) {
  if (value == "w8a8") return QuantMode::kW8A8;
  if (value == "strict") return QuantMode::kStrict;
  return QuantMode::kFp16;
}

QuantizedReading quantized_reading(QuantMode mode) {
  return mode == QuantMode::kW8A8 ? QuantizedReading::kDynamicOnly : QuantizedReading::kAll;
}

ClaimSet match_encoders_in_quantized_graph(const GraphView& graph, QuantMode mode,
                                           const EncoderMatcherOptions& options) {
  const DequantizedView dequantized(graph, quantized_reading(mode));
  ClaimSet encoders = match_vision_encoders(dequantized.view(), options);
  if (!dequantized.changed()) return encoders;
  // An encoder whose weights are all float, with Q/DQ pairs on its activations, is a float model
  // whose author placed those roundings: it is judged as written, Q/DQ and all.
  std::set<std::string> as_written;
  std::erase_if(encoders.claims, [&](Claim& claim) {
    std::set<NodeId> nodes(claim.nodes.begin(), claim.nodes.end());
    const std::string why = dequantized.take_along(nodes);
    if (!dequantized.reads_quantized_weight(nodes)) {
      as_written.insert(claim.anchor_name);
      return true;
    }
    if (!why.empty()) {
      encoders.refusals.push_back(
          {kNoNode, claim.anchor_name, "quantized_value_read_outside", why});
      return true;
    }
    if (const std::string mixed = mixed_dynamic_projection(dequantized, claim.encoder);
        !mixed.empty()) {
      encoders.refusals.push_back({kNoNode, claim.anchor_name, "mixed_dynamic_projection", mixed});
      return true;
    }
    claim.nodes.assign(nodes.begin(), nodes.end());
    claim.encoder.dequantized = true;
    claim.encoder.quant_form =
        has_dynamic_projection(dequantized, claim.encoder) ? "dynamic_int8" : "qdq";
    return false;
  });
  if (as_written.empty()) return encoders;
  ClaimSet written = match_vision_encoders(graph, options);
  std::set<std::string> answered;
  for (Claim& claim : written.claims) {
    if (!as_written.count(claim.anchor_name)) continue;
    answered.insert(claim.anchor_name);
    encoders.claims.push_back(std::move(claim));
  }
  for (Refusal& refusal : written.refusals) {
    if (!as_written.count(refusal.node_name)) continue;
    answered.insert(refusal.node_name);
    encoders.refusals.push_back(std::move(refusal));
  }
  for (const std::string& anchor : as_written) {
    if (answered.count(anchor)) continue;
    encoders.refusals.push_back({kNoNode, anchor, "quantized_activations_float_weights",
                                 "Q/DQ pairs on the activations of an encoder whose weights are "
                                 "float: they are the model's own roundings, kept"});
  }
  return encoders;
}

void resolve_encoder_overlaps(QuantMode mode, ClaimSet& encoders, ClaimSet& qdq_groups,
                              ClaimSet& integer_groups) {
  if (mode == QuantMode::kW8A8) {
    const std::set<NodeId> grouped = nodes_of(qdq_groups);
    std::erase_if(encoders.claims, [&](const Claim& claim) {
      if (!overlaps(claim, grouped)) return false;
      encoders.refusals.push_back({kNoNode, claim.anchor_name, "overlaps_qdq_groups",
                                   "the encoder contains nodes already claimed as QDQ groups "
                                   "(NPUFLOW_QUANT=w8a8 keeps them native int8)"});
      return true;
    });
  }
  const std::set<NodeId> inside = nodes_of(encoders);
  for (ClaimSet* set : {&qdq_groups, &integer_groups}) {
    std::erase_if(set->claims, [&](const Claim& claim) {
      if (!overlaps(claim, inside)) return false;
      set->refusals.push_back({kNoNode, claim.anchor_name, "inside_quantized_encoder",
                               "the encoder that contains it is claimed whole (dynamic int8 "
                               "linears run natively in it; QDQ weights are dequantized once "
                               "under NPUFLOW_QUANT=fp16)"});
      return true;
    });
  }
}

std::optional<StrictQuantFailure> strict_quant_failure(const GraphView& graph, QuantMode mode,
                                                       const ClaimSet& encoders) {
  if (mode != QuantMode::kStrict || !holds_quantization(graph)) return std::nullopt;
  for (const Refusal& refusal : encoders.refusals) {
    NodeId node = refusal.node;
    for (size_t i = 0; node == kNoNode && i < graph.nodes.size(); ++i)
      if (graph.nodes[i].name == refusal.node_name) node = static_cast<NodeId>(i);
    if (node == kNoNode || graph.node(node).outputs.empty()) continue;
    return StrictQuantFailure{
        node, str_cat("NPUFLOW_QUANT=strict: the quantized encoder at '", refusal.node_name,
                      "' is not claimed: ", refusal.reason, " (", refusal.detail, ")")};
  }
  return std::nullopt;
}

}  // namespace npuflow
