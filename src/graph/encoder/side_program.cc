#include "graph/encoder/side_program.h"

#include <algorithm>
#include <cstring>

#include "core/strings.h"
#include "graph/program_nodes.h"

namespace npuflow::encoder {
SideProgram build_side_program(const GraphView& g, const std::vector<ValueId>& wanted,
                               const std::set<NodeId>& claimed,
                               const std::map<ValueId, ValueId>& shape_of) {
  SideProgram out;
  auto inputs_of = [&](NodeId n) { return program_node_inputs(g, n, shape_of); };
  // Every supported producer upstream of the wanted values, stopping at constants, graph inputs
  // and nodes the program cannot take.
  std::set<NodeId> nodes;
  std::map<ValueId, std::string> blocked;  // a value whose producer cannot join, and why
  std::vector<ValueId> stack(wanted.begin(), wanted.end());
  std::set<ValueId> seen;
  while (!stack.empty()) {
    const ValueId v = stack.back();
    stack.pop_back();
    if (v == kNoValue || !seen.insert(v).second || g.is_constant(v)) continue;
    const NodeId p = g.value(v).producer;
    if (p == kNoNode) continue;  // a graph input
    std::string why;
    if (!program_node_ok(g, p, why)) {
      blocked[v] = why;
      continue;
    }
    if (nodes.insert(p).second) {
      for (ValueId in : inputs_of(p)) stack.push_back(in);
    }
  }
  // Drop nodes whose values something outside the claim reads, and nodes that read a value the
  // claim computes without them, until none is left. A reader outside that only feeds the claim
  // (ORT's transpose optimizer puts a Transpose of a rotary table there, which the claim reads
  // through) is taken in instead: the claim needs nothing it computes.
  std::set<NodeId> absorbed;
  auto absorbable = [&](NodeId c) {
    std::string ignored;
    if (!program_node_ok(g, c, ignored)) return false;
    for (ValueId in : g.node(c).inputs) {
      if (in == kNoValue || g.is_constant(in)) continue;
      const NodeId p = g.value(in).producer;
      if (p == kNoNode || !nodes.count(p)) return false;
    }
    for (ValueId o : g.node(c).outputs) {
      if (g.value(o).is_graph_output) return false;
      for (NodeId r : g.value(o).consumers)
        if (!claimed.count(r)) return false;
    }
    return true;
  };
  for (bool changed = true; changed;) {
    changed = false;
    absorbed.clear();
    for (NodeId n : nodes)
      for (ValueId o : g.node(n).outputs)
        for (NodeId c : g.value(o).consumers)
          if (!claimed.count(c) && !nodes.count(c) && absorbable(c)) absorbed.insert(c);
    for (auto it = nodes.begin(); it != nodes.end();) {
      const NodeInfo& node = g.node(*it);
      std::string why;
      for (ValueId o : node.outputs) {
        const ValueInfo& info = g.value(o);
        if (info.is_graph_output) why = str_cat("'", info.name, "' is a graph output");
        for (NodeId c : info.consumers)
          if (!claimed.count(c) && !nodes.count(c) && !absorbed.count(c))
            why = str_cat("'", info.name, "' is also read by '", g.node(c).name, "'");
      }
      for (ValueId in : inputs_of(*it)) {
        if (in == kNoValue || g.is_constant(in)) continue;
        const NodeId p = g.value(in).producer;
        if (p != kNoNode && claimed.count(p) && !nodes.count(p))
          why = str_cat("'", node.name, "' reads '", g.value(in).name,
                        "', which the claim computes itself");
      }
      if (!why.empty()) {
        for (ValueId o : node.outputs) blocked[o] = why;
        it = nodes.erase(it);
        changed = true;
      } else {
        ++it;
      }
    }
  }
  // What the program computes of the wanted values; why not, for the others.
  std::vector<ValueId> outputs;
  for (ValueId w : wanted) {
    const NodeId p = g.value(w).producer;
    if (p != kNoNode && nodes.count(p)) {
      if (out.computed.insert(w).second) outputs.push_back(w);
      continue;
    }
    // The first blocked value upstream of `w` names the node that stopped it.
    std::string why = blocked.count(w) ? blocked[w] : "";
    if (why.empty()) {
      std::vector<ValueId> up = {w};
      std::set<ValueId> visited;
      while (!up.empty() && why.empty()) {
        const ValueId v = up.back();
        up.pop_back();
        if (!visited.insert(v).second) continue;
        if (auto it = blocked.find(v); it != blocked.end()) why = it->second;
        const NodeId q = g.value(v).producer;
        if (q != kNoNode)
          for (ValueId in : g.node(q).inputs)
            if (in != kNoValue) up.push_back(in);
      }
    }
    if (g.value(w).is_graph_input) why = str_cat("'", g.value(w).name, "' is a graph input");
    out.why_not[w] = why.empty() ? "no program computes it" : why;
  }
  // Keep only the nodes the computed values need.
  std::set<NodeId> needed;
  stack.assign(outputs.begin(), outputs.end());
  seen.clear();
  while (!stack.empty()) {
    const ValueId v = stack.back();
    stack.pop_back();
    if (v == kNoValue || !seen.insert(v).second) continue;
    const NodeId p = g.value(v).producer;
    if (p == kNoNode || !nodes.count(p) || !needed.insert(p).second) continue;
    for (ValueId in : inputs_of(p)) stack.push_back(in);
  }
  out.nodes = needed;
  // Absorbed readers whose inputs the program still computes join the claim.
  for (NodeId c : absorbed) {
    bool fed = true;
    for (ValueId in : g.node(c).inputs)
      if (in != kNoValue && !g.is_constant(in)) fed &= needed.count(g.value(in).producer) > 0;
    if (fed) out.nodes.insert(c);
  }
  out.program = program_of(g, needed, outputs, shape_of);
  return out;
}

}  // namespace npuflow::encoder
