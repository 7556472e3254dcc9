#include "graph/program_nodes.h"

#include <algorithm>

#include "core/strings.h"

namespace npuflow {

namespace {

ProgramAttribute program_attribute(const Attribute& a) {
  ProgramAttribute p;
  p.integer = a.integer;
  p.real = a.real;
  p.integers = a.integers;
  if (a.tensor) {
    p.tensor = ProgramTensor::copy_of(a.tensor->type, a.tensor->shape, a.tensor->bytes.data());
  }
  return p;
}

// The ONNX types Cast may target in a program (float, int32, int64, bool).
bool cast_target_ok(int64_t to) {
  return to == 1 || to == 6 || to == 7 || to == 9;
}

}  // namespace

std::vector<ValueId> program_node_inputs(const GraphView& g, NodeId n,
                                         const std::map<ValueId, ValueId>& shape_of) {
  std::vector<ValueId> inputs = g.node(n).inputs;
  if (g.node(n).op_type == "Shape" && !inputs.empty())
    if (auto it = shape_of.find(inputs[0]); it != shape_of.end()) inputs[0] = it->second;
  return inputs;
}

TensorProgram program_of(const GraphView& g, const std::set<NodeId>& nodes,
                         const std::vector<ValueId>& outputs,
                         const std::map<ValueId, ValueId>& shape_of) {
  TensorProgram program;
  std::map<ValueId, int> slot;
  auto slot_of = [&](ValueId v) -> int {
    if (v == kNoValue) return -1;
    if (auto it = slot.find(v); it != slot.end()) return it->second;
    const int s = program.slot_count++;
    slot[v] = s;
    const ValueInfo& info = g.value(v);
    if (g.is_constant(v)) {
      program.constants.push_back({s, info.name, {}});
    } else if (info.producer == kNoNode || !nodes.count(info.producer)) {
      program.input_slots.push_back(s);
      program.input_names.push_back(info.name);
    }
    return s;
  };
  for (NodeId n : nodes) {  // std::set: ascending ids, which is topological order
    const NodeInfo& node = g.node(n);
    ProgramOp op;
    op.op_type = node.op_type;
    for (ValueId in : program_node_inputs(g, n, shape_of)) op.inputs.push_back(slot_of(in));
    for (ValueId o : node.outputs) op.outputs.push_back(slot_of(o));
    for (const auto& [key, value] : node.attributes)
      op.attributes.emplace_back(key, program_attribute(value));
    program.ops.push_back(std::move(op));
  }
  for (ValueId w : outputs) {
    program.output_slots.push_back(slot_of(w));
    program.output_names.push_back(g.value(w).name);
  }
  return program;
}

bool program_node_ok(const GraphView& g, NodeId n, std::string& why) {
  const NodeInfo& node = g.node(n);
  if (!is_onnx_domain(node.domain) || !program_op_supported(node.op_type)) {
    why = str_cat("'", node.name, "' (", node.op_type, ") is not a tensor-program op");
    return false;
  }
  if (!node.implicit_inputs.empty()) {
    why = str_cat("'", node.name, "' reads a subgraph's values");
    return false;
  }
  for (const auto& [key, value] : node.attributes) {
    // Attributes the interpreter does not read would change what the op computes.
    static const char* const known[] = {"axis",
                                        "axes",
                                        "perm",
                                        "to",
                                        "start",
                                        "end",
                                        "allowzero",
                                        "exclusive",
                                        "reverse",
                                        "value",
                                        "starts",
                                        "ends",
                                        "detect_negative",
                                        "detect_positive",
                                        "saturate",
                                        "batch_dims"};
    const std::string& name = key;  // a structured binding: lambdas cannot capture it in clang 14
    if (std::none_of(std::begin(known), std::end(known),
                     [&](const char* k) { return name == k; })) {
      why = str_cat("'", node.name, "' (", node.op_type, ") has attribute '", key, "'");
      return false;
    }
    if (key == "value" && !(value.tensor && element_count(value.tensor->shape) == 1 &&
                            program_type_supported(value.tensor->type))) {
      why = str_cat("'", node.name, "' has a value the program does not compute on");
      return false;
    }
  }
  if (node.op_type == "Cast" && !cast_target_ok(node.int_attribute("to", 0))) {
    why = str_cat("'", node.name, "' casts to a type the program does not compute on");
    return false;
  }
  for (ValueId v : node.inputs) {
    if (v == kNoValue) continue;
    if (!program_type_supported(g.value(v).type)) {
      why = str_cat("'", node.name, "' reads ", element_type_name(g.value(v).type), " '",
                    g.value(v).name, "'");
      return false;
    }
  }
  for (ValueId v : node.outputs) {
    if (!program_type_supported(g.value(v).type)) {
      why = str_cat("'", node.name, "' writes ", element_type_name(g.value(v).type));
      return false;
    }
  }
  if (node.op_type == "MatMul") {
    // Only an outer product (a contraction of one) is exact: rotary angles, positions x
    // frequencies. Anything larger is a projection, the encoder's own work.
    const ValueInfo &a = g.value(node.input(0)), &b = g.value(node.input(1));
    const bool a_one = a.has_shape && a.shape.size() >= 2 && a.shape.back() == 1;
    const bool b_one = b.has_shape && b.shape.size() >= 2 && b.shape[b.shape.size() - 2] == 1;
    if (!a_one && !b_one) {
      why = str_cat("'", node.name, "' (MatMul) contracts over more than one element");
      return false;
    }
  }
  return true;
}

}  // namespace npuflow
