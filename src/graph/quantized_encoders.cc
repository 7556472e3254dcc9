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

}  // namespace

QuantMode quant_mode(const std::string& value) {
  if (value == "w8a8") return QuantMode::kW8A8;
  if (value == "strict") return QuantMode::kStrict;
  return QuantMode::kFp16;
}

ClaimSet match_encoders_in_quantized_graph(const GraphView& graph, QuantMode mode,
                                           const EncoderMatcherOptions& options) {
  if (mode == QuantMode::kW8A8) return match_vision_encoders(graph, options);
  const DequantizedView dequantized(graph);
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
    claim.nodes.assign(nodes.begin(), nodes.end());
    claim.encoder.dequantized = true;
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

void resolve_encoder_overlaps(QuantMode mode, ClaimSet& encoders,
                              const std::vector<ClaimSet*>& groups) {
  if (mode == QuantMode::kW8A8) {
    std::set<NodeId> grouped;
    for (const ClaimSet* set : groups) grouped.merge(nodes_of(*set));
    std::erase_if(encoders.claims, [&](const Claim& claim) {
      if (!overlaps(claim, grouped)) return false;
      encoders.refusals.push_back({kNoNode, claim.anchor_name, "overlaps_qdq_groups",
                                   "the encoder contains nodes already claimed as QDQ groups "
                                   "(NPUFLOW_QUANT=w8a8 keeps them native int8)"});
      return true;
    });
    return;
  }
  const std::set<NodeId> inside = nodes_of(encoders);
  for (ClaimSet* set : groups) {
    std::erase_if(set->claims, [&](const Claim& claim) {
      if (!overlaps(claim, inside)) return false;
      set->refusals.push_back({kNoNode, claim.anchor_name, "inside_quantized_encoder",
                               "the encoder that contains it is claimed whole, its weights "
                               "dequantized once (NPUFLOW_QUANT=fp16)"});
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
