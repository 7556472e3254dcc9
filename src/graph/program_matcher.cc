#include "graph/program_matcher.h"

#include "graph/program_nodes.h"

namespace npuflow {
namespace {

// The claim of `nodes` as one program: its outputs are the values read outside the set.
Claim program_claim(const GraphView& g, const std::set<NodeId>& nodes) {
  std::vector<ValueId> outputs;
  for (NodeId n : nodes)
    for (ValueId o : g.node(n).outputs) {
      const ValueInfo& info = g.value(o);
      bool outside = info.is_graph_output;
      for (NodeId c : info.consumers) outside |= !nodes.count(c);
      if (outside) outputs.push_back(o);
    }
  Claim claim;
  claim.kind = ClaimKind::kTensorProgram;
  claim.nodes.assign(nodes.begin(), nodes.end());
  claim.anchor_name = g.node(*nodes.begin()).name;
  claim.program = program_of(g, nodes, outputs);
  return claim;
}

}  // namespace

std::vector<Claim> match_program_ops(const GraphView& g, const std::set<NodeId>& taken) {
  std::set<NodeId> ok;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const auto n = static_cast<NodeId>(i);
    std::string why;
    if (!taken.count(n) && program_node_ok(g, n, why)) ok.insert(n);
  }
  std::vector<Claim> claims;
  if (ok.empty()) return claims;
  if (ok.size() == g.nodes.size()) {
    claims.push_back(program_claim(g, ok));
    return claims;
  }
  for (NodeId n : ok) claims.push_back(program_claim(g, {n}));
  return claims;
}

}  // namespace npuflow
