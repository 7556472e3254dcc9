// Graph nodes as tensor-program ops (ops/tensor_program.h): which nodes the interpreter can run,
// and the program a set of them makes.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/graph_view.h"
#include "ops/tensor_program.h"

namespace npuflow {

// Whether one node can be a program op (domain, op set, types, attributes), with why not.
bool program_node_ok(const GraphView& graph, NodeId node, std::string& why);

// A node's inputs as the program reads them: a Shape of a value in `shape_of` reads the value it
// maps to (one of the same shape).
std::vector<ValueId> program_node_inputs(const GraphView& graph, NodeId node,
                                         const std::map<ValueId, ValueId>& shape_of);

// The program that computes `outputs` with `nodes` (ascending ids are topological order): the
// values they read that none of them writes are its inputs, or its constants (by name).
TensorProgram program_of(const GraphView& graph, const std::set<NodeId>& nodes,
                         const std::vector<ValueId>& outputs,
                         const std::map<ValueId, ValueId>& shape_of = {});

}  // namespace npuflow
