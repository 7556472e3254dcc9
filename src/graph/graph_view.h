// GraphView: a runtime-neutral snapshot of a model graph for the matchers. The ONNX Runtime front
// end fills it from an OrtGraph; tests build it by hand. Node and value ids index the vectors.
// Constant data is borrowed: it stays valid only while the runtime's graph does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/element_type.h"

namespace npuflow {

using NodeId = int32_t;
using ValueId = int32_t;
constexpr ValueId kNoValue = -1;  // an omitted optional input
constexpr NodeId kNoNode = -1;

struct ConstantData {
  const void* data = nullptr;
  size_t bytes = 0;
};

struct ValueInfo {
  std::string name;
  ElementType type = ElementType::kUnknown;
  std::vector<int64_t> shape;  // -1 for a dynamic dimension
  bool has_shape = false;
  NodeId producer = kNoNode;
  std::vector<NodeId> consumers;
  bool is_graph_input = false;
  bool is_graph_output = false;
  std::optional<ConstantData> constant;  // set for constant initializers only
};

// A TENSOR attribute (ConstantOfShape's value), copied: only small ones are kept.
struct AttributeTensor {
  ElementType type = ElementType::kUnknown;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  static AttributeTensor of_int64s(const std::vector<int64_t>& shape,
                                   const std::vector<int64_t>& values);
};

struct Attribute {
  std::optional<int64_t> integer;
  std::optional<float> real;
  std::optional<std::string> text;
  std::optional<std::vector<int64_t>> integers;  // INTS (perm, pads, strides, axes)
  std::optional<AttributeTensor> tensor;

  // The values of an int64 or int32 TENSOR attribute of at most 16 elements (ConstantOfShape's
  // value), else nothing.
  std::optional<std::vector<int64_t>> tensor_integers() const;
};

struct NodeInfo {
  std::string name;
  std::string op_type;
  std::string domain;  // "" for ai.onnx
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  std::vector<ValueId> implicit_inputs;  // read by a nested subgraph
  std::vector<std::pair<std::string, Attribute>> attributes;

  const Attribute* attribute(const std::string& attr_name) const;
  int64_t int_attribute(const std::string& attr_name, int64_t fallback) const;
  ValueId input(size_t index) const { return index < inputs.size() ? inputs[index] : kNoValue; }
};

class GraphView {
 public:
  std::string name;
  std::vector<NodeInfo> nodes;  // topological order
  std::vector<ValueInfo> values;

  const NodeInfo& node(NodeId id) const { return nodes[static_cast<size_t>(id)]; }
  const ValueInfo& value(ValueId id) const { return values[static_cast<size_t>(id)]; }
  bool is_constant(ValueId id) const { return id != kNoValue && value(id).constant.has_value(); }
  // The node that produces `id`, if it has op_type `op` in the ONNX or com.microsoft domain.
  NodeId producer_if(ValueId id, const char* op) const;

  // Builder helpers (used by the front end and by tests).
  ValueId add_value(ValueInfo info);
  ValueId find_value(const std::string& value_name) const;
  NodeId add_node(NodeInfo info);  // links producers and consumers
};

// The domains whose ops mean what the ONNX spec says: ai.onnx ("" too) and com.microsoft (ONNX
// Runtime's contrib ops keep the ONNX meaning for the names they share). Every matcher asks this.
// The ONNX domain itself ("" or "ai.onnx"): ops the integer matchers take only from there.
inline bool is_onnx_domain(const std::string& domain) {
  return domain.empty() || domain == "ai.onnx";
}
bool is_standard_domain(const std::string& domain);
inline bool is_standard_domain(const NodeInfo& node) {
  return is_standard_domain(node.domain);
}

// The product of the dimensions; -1 if one is dynamic or the product overflows int64.
int64_t element_count(const std::vector<int64_t>& shape);
// The product of every dimension but the last (the rows of a GEMM operand); -1 if one is dynamic.
int64_t leading_rows(const std::vector<int64_t>& shape);

}  // namespace npuflow
