#include "graph/quantized_view.h"

#include <algorithm>
#include <cstring>

#include "core/strings.h"
#include "graph/quant_params.h"

namespace npuflow {
namespace {

bool is_op(const NodeInfo& node, const char* op) {
  return node.op_type == op && is_standard_domain(node);
}

// The scale index of every element of a tensor of `shape` quantized along `axis` (per tensor
// when there is one scale); false when the scales fit neither form.
bool scale_layout(const std::vector<int64_t>& shape, int64_t axis, size_t scales, int64_t& inner,
                  int64_t& dim) {
  inner = 1;
  dim = 1;
  if (scales == 1) return true;
  const auto rank = static_cast<int64_t>(shape.size());
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank || shape[static_cast<size_t>(axis)] != static_cast<int64_t>(scales))
    return false;
  dim = shape[static_cast<size_t>(axis)];
  for (int64_t d = axis + 1; d < rank; ++d) inner *= shape[static_cast<size_t>(d)];
  return true;
}

// The scale and zero points of a DequantizeLinear of int32 (a bias): ONNX requires a zero point
// of 0 there, so only an absent or all-zero one is read.
bool read_int32_params(const GraphView& graph, const NodeInfo& node, QuantParams& out) {
  const ValueId scale_id = node.input(1), zp_id = node.input(2);
  if (!graph.is_constant(scale_id) || graph.value(scale_id).type != ElementType::kFloat32)
    return false;
  const ConstantData& scale = *graph.value(scale_id).constant;
  out.scales.resize(scale.bytes / sizeof(float));
  if (out.scales.empty()) return false;
  std::memcpy(out.scales.data(), scale.data, out.scales.size() * sizeof(float));
  out.zero_points.assign(out.scales.size(), 0);
  if (zp_id != kNoValue) {
    if (!graph.is_constant(zp_id) || graph.value(zp_id).type != ElementType::kInt32) return false;
    const ConstantData& zp = *graph.value(zp_id).constant;
    const auto* z = static_cast<const int32_t*>(zp.data);
    if (!std::all_of(z, z + zp.bytes / sizeof(int32_t), [](int32_t v) { return v == 0; }))
      return false;
  }
  out.axis = node.int_attribute("axis", 1);
  out.block_size = node.int_attribute("block_size", 0);
  return true;
}

bool same_params(const QuantParams& a, const QuantParams& b) {
  return a.scales == b.scales && a.zero_points == b.zero_points &&
         (a.scales.size() == 1 || a.axis == b.axis) && a.block_size == b.block_size;
}

}  // namespace

DequantizedView::DequantizedView(const GraphView& graph) : source_(graph) {
  bool any = false;
  for (const NodeInfo& node : graph.nodes)
    any = any || is_op(node, "DequantizeLinear") || is_op(node, "QuantizeLinear");
  if (!any) return;
  view_ = graph;
  for (size_t i = 0; i < view_.nodes.size(); ++i) {
    const auto id = static_cast<NodeId>(i);
    if (is_op(view_.node(id), "DequantizeLinear")) dequantize_constant(id);
    if (is_op(view_.node(id), "QuantizeLinear")) bypass_pair(id);
  }
}

void DequantizedView::dequantize_constant(NodeId dq) {
  const NodeInfo& node = view_.node(dq);
  if (node.outputs.size() != 1 || !view_.is_constant(node.input(0))) return;
  const ValueInfo& x = view_.value(node.input(0));
  const ValueInfo& y = view_.value(node.outputs[0]);
  if (y.type != ElementType::kFloat32 || y.is_graph_output || !x.has_shape) return;
  QuantParams params;
  if (x.type == ElementType::kInt32) {
    if (!read_int32_params(view_, node, params)) return;
  } else if (!is_8bit(x.type) || read_quant_params(view_, node, x.type, params)) {
    return;
  }
  const int64_t count = element_count(x.shape);
  int64_t inner = 1, dim = 1;
  if (params.block_size != 0 || count < 0 ||
      x.constant->bytes != static_cast<size_t>(count) * element_size(x.type) ||
      !scale_layout(x.shape, params.axis, params.scales.size(), inner, dim))
    return;
  auto values = std::make_unique<std::vector<float>>(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const auto c = static_cast<size_t>((i / inner) % dim);
    const auto k = static_cast<size_t>(i);
    int64_t q = 0;
    if (x.type == ElementType::kInt8) q = static_cast<const int8_t*>(x.constant->data)[k];
    if (x.type == ElementType::kUInt8) q = static_cast<const uint8_t*>(x.constant->data)[k];
    if (x.type == ElementType::kInt32) q = static_cast<const int32_t*>(x.constant->data)[k];
    // As ONNX Runtime computes it: the integer difference, converted, times the scale.
    (*values)[k] = static_cast<float>(q - params.zero_points[c]) * params.scales[c];
  }
  ValueInfo& out = view_.values[static_cast<size_t>(node.outputs[0])];
  out.constant = ConstantData{values->data(), values->size() * sizeof(float)};
  out.shape = x.shape;
  out.has_shape = true;
  storage_.push_back(std::move(values));
  detach(dq);
  dequantized_constants_.insert(dq);
}

void DequantizedView::bypass_pair(NodeId q) {
  const NodeInfo& node = view_.node(q);
  if (node.outputs.size() != 1 || node.input(0) == kNoValue) return;
  const ValueId source = node.input(0);
  const ValueInfo& quantized = view_.value(node.outputs[0]);
  if (view_.value(source).type != ElementType::kFloat32 || !is_8bit(quantized.type) ||
      quantized.is_graph_output || quantized.consumers.empty())
    return;
  QuantParams params;
  if (read_quant_params(view_, node, quantized.type, params) || params.block_size != 0) return;
  // Every reader of the quantized value dequantizes it back with the same parameters.
  std::vector<NodeId> dequantizers;
  for (NodeId c : quantized.consumers) {
    const NodeInfo& dq = view_.node(c);
    QuantParams back;
    if (!is_op(dq, "DequantizeLinear") || dq.outputs.size() != 1 || dq.input(0) != node.outputs[0])
      return;
    const ValueInfo& out = view_.value(dq.outputs[0]);
    if (out.type != ElementType::kFloat32 || out.is_graph_output ||
        read_quant_params(view_, dq, quantized.type, back) || !same_params(params, back))
      return;
    dequantizers.push_back(c);
  }
  for (NodeId dq : dequantizers) {
    const ValueId dropped = view_.node(dq).outputs[0];
    for (NodeId reader : view_.value(dropped).consumers) {
      for (ValueId& in : view_.nodes[static_cast<size_t>(reader)].inputs)
        if (in == dropped) in = source;
      view_.values[static_cast<size_t>(source)].consumers.push_back(reader);
    }
    view_.values[static_cast<size_t>(dropped)].consumers.clear();
    detach(dq);
  }
  detach(q);
}

void DequantizedView::detach(NodeId id) {
  NodeInfo& node = view_.nodes[static_cast<size_t>(id)];
  for (ValueId in : node.inputs) {
    if (in == kNoValue) continue;
    auto& readers = view_.values[static_cast<size_t>(in)].consumers;
    if (auto it = std::find(readers.begin(), readers.end(), id); it != readers.end())
      readers.erase(it);
  }
  for (ValueId out : node.outputs) view_.values[static_cast<size_t>(out)].producer = kNoNode;
  node.inputs.clear();
  node.outputs.clear();
  seen_through_.insert(id);
}

std::string DequantizedView::take_along(std::set<NodeId>& nodes) const {
  std::set<NodeId> added;
  for (bool grew = true; grew;) {
    grew = false;
    for (NodeId n : std::vector<NodeId>(nodes.begin(), nodes.end())) {
      for (ValueId in : source_.node(n).inputs) {
        if (in == kNoValue) continue;
        const NodeId p = source_.value(in).producer;
        if (p != kNoNode && seen_through_.count(p) && nodes.insert(p).second) {
          added.insert(p);
          grew = true;
        }
      }
    }
  }
  for (NodeId n : added) {
    for (ValueId out : source_.node(n).outputs) {
      const ValueInfo& info = source_.value(out);
      const bool outside =
          info.is_graph_output || std::any_of(info.consumers.begin(), info.consumers.end(),
                                              [&](NodeId c) { return nodes.count(c) == 0; });
      if (outside) {
        return str_cat("'", info.name, "' (", source_.node(n).op_type, " '", source_.node(n).name,
                       "') is also read outside the claim");
      }
    }
  }
  return {};
}

bool DequantizedView::reads_quantized_weight(const std::set<NodeId>& nodes) const {
  return std::any_of(nodes.begin(), nodes.end(),
                     [&](NodeId n) { return dequantized_constants_.count(n) > 0; });
}

}  // namespace npuflow
