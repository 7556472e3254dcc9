// The loop of a matcher that claims single nodes of one op type (float MatMuls as int8,
// ConvTranspose): every standard-domain node of that type no other claim holds is a candidate,
// claimed or refused by the matcher's own rule.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "graph/claim.h"
#include "graph/graph_view.h"

namespace npuflow {

inline std::optional<Refusal> refuse_node(NodeId id, const NodeInfo& node, const char* reason,
                                          std::string detail) {
  return Refusal{id, node.name, reason, std::move(detail)};
}

// match_one(graph, id, claim) returns the refusal, or nullopt with `claim` filled.
template <typename MatchOne>
ClaimSet match_single_nodes(const GraphView& graph, const std::set<NodeId>& taken,
                            std::string_view op_type, MatchOne&& match_one) {
  ClaimSet result;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const auto id = static_cast<NodeId>(i);
    const NodeInfo& node = graph.node(id);
    if (node.op_type != op_type || !is_onnx_domain(node.domain) || taken.count(id) > 0) continue;
    result.candidates++;
    Claim claim;
    if (auto refused = match_one(graph, id, claim)) {
      result.refusals.push_back(std::move(*refused));
    } else {
      result.claims.push_back(std::move(claim));
    }
  }
  return result;
}

}  // namespace npuflow
