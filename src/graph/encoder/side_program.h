// The nodes around an encoder that compute the runtime values its claim reads (the token
// embedding sum, attention masks, rotary tables from the sequence length) from graph inputs and
// constants, as a tensor program the fused node runs itself (ops/tensor_program.h). Any op
// sequence of the program's op set is taken, whatever the exporter wrote: the program computes
// what the graph says, exactly, instead of recognizing one way to write a mask.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/graph_view.h"
#include "ops/tensor_program.h"

namespace npuflow::encoder {

struct SideProgram {
  TensorProgram program;       // constants by name (data read at compile time)
  std::set<NodeId> nodes;      // the program's nodes: they join the claim
  std::set<ValueId> computed;  // the wanted values the program produces
  // Why a wanted value stays a runtime input: the first node the program could not take.
  std::map<ValueId, std::string> why_not;
};

// A program for as many of `wanted` as can be computed inside a claim made of `claimed` plus the
// program's own nodes: a node joins when its op, attributes and types are the program's, and
// every output it has is read only inside (nothing outside the claim needs a program value, and
// a program never reads a value the claim computes on its own).
// `shape_of` names, for claimed values whose shape equals another value's (the residual stream
// has the embedding sum's), that value: a Shape of the first is computed from the second.
SideProgram build_side_program(const GraphView& graph, const std::vector<ValueId>& wanted,
                               const std::set<NodeId>& claimed,
                               const std::map<ValueId, ValueId>& shape_of = {});

}  // namespace npuflow::encoder
