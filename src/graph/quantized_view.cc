#include "graph/quantized_view.h"

#include <algorithm>
#include <cstring>

#include "core/strings.h"
#include "graph/integer_matmul_matcher.h"
#include "graph/quant_params.h"

namespace npuflow {
namespace {

// Which scale each element of a tensor of `shape` reads: per tensor, per slice along `axis`
// (a 1-D scale), or per block of `block` elements along it (a scale of the tensor's rank whose
// `axis` dimension is ceil(dim / block)).
struct ScaleLayout {
  int64_t inner = 1, dim = 1, block = 0, blocks = 1;
  size_t scales = 1;

  size_t index(int64_t i) const {
    if (scales == 1) return 0;
    const int64_t along = (i / inner) % dim;
    if (block == 0) return static_cast<size_t>(along);
    const int64_t outer = i / (inner * dim);
    return static_cast<size_t>((outer * blocks + along / block) * inner + i % inner);
  }
};

// False when the scales fit none of those forms (the CPU EP then judges the model).
bool scale_layout(const std::vector<int64_t>& shape, const QuantParams& params, ScaleLayout& out) {
  out = ScaleLayout{};
  out.scales = params.scales.size();
  if (params.block_size < 0) return false;
  if (out.scales == 1 && params.block_size == 0) return true;
  const auto rank = static_cast<int64_t>(shape.size());
  const int64_t axis = params.axis < 0 ? params.axis + rank : params.axis;
  if (axis < 0 || axis >= rank) return false;
  out.dim = shape[static_cast<size_t>(axis)];
  for (int64_t d = axis + 1; d < rank; ++d) out.inner *= shape[static_cast<size_t>(d)];
  if (out.dim <= 0) return false;
  if (params.block_size == 0) return static_cast<int64_t>(out.scales) == out.dim;
  out.block = params.block_size;
  out.blocks = (out.dim + out.block - 1) / out.block;
  const int64_t count = element_count(shape);
  return static_cast<int64_t>(out.scales) == count / out.dim * out.blocks;
}

bool same_params(const QuantParams& a, const QuantParams& b) {
  return a.scales == b.scales && a.zero_points == b.zero_points &&
         (a.scales.size() == 1 || a.axis == b.axis) && a.block_size == b.block_size;
}

}  // namespace

DequantizedView::DequantizedView(const GraphView& graph, QuantizedReading reading)
    : source_(graph) {
  if (!holds_quantization(graph)) return;
  view_ = graph;
  for (size_t i = 0; i < view_.nodes.size(); ++i) {
    const auto id = static_cast<NodeId>(i);
    const NodeInfo& node = view_.node(id);
    if (node.op_type == "DynamicQuantizeLinear" && is_onnx_domain(node.domain)) {
      fold_dynamic_linears(id);
    } else if (is_dequantize_node(node)) {
      if (reading == QuantizedReading::kAll) dequantize_constant(id);
      // Not a constant's: perhaps a Gather's of one (quantize_dynamic's embedding tables).
      if (!seen_through_.count(id)) dequantize_gathered_table(id);
    } else if (reading == QuantizedReading::kAll && is_quantize_node(node)) {
      bypass_pair(id);
    }
  }
}

void DequantizedView::dequantize_constant(NodeId dq) {
  const NodeInfo& node = view_.node(dq);
  if (node.outputs.size() != 1 || !view_.is_constant(node.input(0))) return;
  const ValueInfo& x = view_.value(node.input(0));
  const ValueInfo& y = view_.value(node.outputs[0]);
  if (y.type != ElementType::kFloat32 || y.is_graph_output || !x.has_shape) return;
  QuantParams params;
  if (read_quant_params(view_, node, x.type, params, ScaleRule::kFinite)) return;
  const int64_t count = element_count(x.shape);
  ScaleLayout layout;
  if (count < 0 || x.constant->bytes != storage_bytes(x.type, count) ||
      !scale_layout(x.shape, params, layout))
    return;
  auto values = std::make_unique<std::vector<float>>(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const size_t c = layout.index(i);
    const auto k = static_cast<size_t>(i);
    // As ONNX Runtime computes it: the integer difference, converted, times the scale.
    const int64_t q = integer_element(*x.constant, x.type, k);
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
  if (view_.value(source).type != ElementType::kFloat32 || quantized.is_graph_output ||
      quantized.consumers.empty())
    return;
  QuantParams params;
  if (read_quant_params(view_, node, quantized.type, params) || params.block_size != 0) return;
  // Every reader of the quantized value dequantizes it back with the same parameters.
  std::vector<NodeId> dequantizers;
  for (NodeId c : quantized.consumers) {
    const NodeInfo& dq = view_.node(c);
    QuantParams back;
    if (!is_dequantize_node(dq) || dq.outputs.size() != 1 || dq.input(0) != node.outputs[0]) return;
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

// DequantizeLinear(Gather(constant table, ids)) with one scale reads as the Gather of the
// dequantized table: element for element the same values.
void DequantizedView::dequantize_gathered_table(NodeId dq) {
  const NodeInfo& node = view_.node(dq);
  const ValueId quantized = node.input(0);
  if (node.outputs.size() != 1 || quantized == kNoValue) return;
  const NodeId gather_id = view_.value(quantized).producer;
  if (gather_id == kNoNode) return;
  const NodeInfo& gather = view_.node(gather_id);
  const ValueId table_id = gather.input(0);
  if (gather.op_type != "Gather" || !is_standard_domain(gather) || gather.outputs.size() != 1 ||
      !view_.is_constant(table_id) || view_.value(table_id).consumers.size() != 1 ||
      view_.value(quantized).consumers.size() != 1 || view_.value(quantized).is_graph_output)
    return;
  const ValueInfo& table = view_.value(table_id);
  const ValueId out = node.outputs[0];
  if (view_.value(out).type != ElementType::kFloat32 || view_.value(out).is_graph_output ||
      !table.has_shape)
    return;
  QuantParams params;
  if (read_quant_params(view_, node, table.type, params, ScaleRule::kFinite) ||
      params.scales.size() != 1 || params.block_size != 0)
    return;
  const int64_t count = element_count(table.shape);
  if (count < 0 || table.constant->bytes != storage_bytes(table.type, count)) return;
  auto values = std::make_unique<std::vector<float>>(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const int64_t q = integer_element(*table.constant, table.type, static_cast<size_t>(i));
    (*values)[static_cast<size_t>(i)] =
        static_cast<float>(q - params.zero_points[0]) * params.scales[0];
  }
  ValueInfo& float_table = view_.values[static_cast<size_t>(table_id)];
  float_table.type = ElementType::kFloat32;
  float_table.constant = ConstantData{values->data(), values->size() * sizeof(float)};
  storage_.push_back(std::move(values));
  detach(dq);
  view_.values[static_cast<size_t>(quantized)].producer = kNoNode;
  view_.nodes[static_cast<size_t>(gather_id)].outputs = {out};
  view_.values[static_cast<size_t>(out)].producer = gather_id;
  dequantized_constants_.insert(dq);
}

// All or nothing per DynamicQuantizeLinear: every reader of its outputs must belong to a dynamic
// int8 linear it feeds, or the quantized value would still be needed.
void DequantizedView::fold_dynamic_linears(NodeId quantize) {
  const NodeInfo& dql = view_.node(quantize);
  if (dql.outputs.size() != 3) return;
  for (ValueId out : dql.outputs) {
    if (out == kNoValue || view_.value(out).is_graph_output) return;
  }
  std::vector<DynamicInt8Linear> linears;
  std::set<NodeId> matmuls, products;
  for (NodeId reader : view_.value(dql.outputs[0]).consumers) {
    auto linear = find_dynamic_int8_linear(view_, reader);
    if (!linear || linear->quantize != quantize || matmuls.count(reader) ||
        view_.value(linear->weight).consumers.size() != 1)
      return;
    matmuls.insert(reader);
    products.insert(linear->scale_product);
    linears.push_back(std::move(*linear));
  }
  if (linears.empty()) return;
  for (NodeId reader : view_.value(dql.outputs[1]).consumers)
    if (!products.count(reader)) return;
  for (NodeId reader : view_.value(dql.outputs[2]).consumers)
    if (!matmuls.count(reader)) return;

  for (const DynamicInt8Linear& linear : linears) {
    const ValueInfo& w = view_.value(linear.weight);
    auto values = std::make_unique<std::vector<float>>(static_cast<size_t>(linear.k * linear.n));
    for (int64_t i = 0; i < linear.k * linear.n; ++i) {
      const int64_t col = i % linear.n;
      const size_t zp = linear.w_zero_points.size() == 1 ? 0 : static_cast<size_t>(col);
      const size_t sc = linear.w_scales.size() == 1 ? 0 : static_cast<size_t>(col);
      const int64_t q = integer_element(*w.constant, w.type, static_cast<size_t>(i));
      (*values)[static_cast<size_t>(i)] =
          static_cast<float>(q - linear.w_zero_points[zp]) * linear.w_scales[sc];
    }
    dynamic_weights_[w.name] = DynamicInt8Weight{w.type,   w.constant->data,     linear.k,
                                                 linear.n, linear.w_zero_points, linear.w_scales};
    ValueInfo& weight = view_.values[static_cast<size_t>(linear.weight)];
    weight.type = ElementType::kFloat32;
    weight.constant = ConstantData{values->data(), values->size() * sizeof(float)};
    storage_.push_back(std::move(values));
    for (NodeId scale_node : {linear.scale_product, linear.cast, linear.scale_mul})
      detach(scale_node);
    // The MatMulInteger becomes MatMul(input, float weight) writing the scale Mul's output.
    NodeInfo& mm = view_.nodes[static_cast<size_t>(linear.matmul)];
    for (ValueId in : mm.inputs) {
      if (in == kNoValue) continue;
      auto& readers = view_.values[static_cast<size_t>(in)].consumers;
      std::erase(readers, linear.matmul);
    }
    for (ValueId out : mm.outputs) view_.values[static_cast<size_t>(out)].producer = kNoNode;
    mm.op_type = "MatMul";
    mm.domain.clear();
    mm.inputs = {linear.input, linear.weight};
    mm.outputs = {linear.output};
    view_.values[static_cast<size_t>(linear.input)].consumers.push_back(linear.matmul);
    view_.values[static_cast<size_t>(linear.weight)].consumers.push_back(linear.matmul);
    view_.values[static_cast<size_t>(linear.output)].producer = linear.matmul;
    dynamic_linears_.insert(linear.matmul);
  }
  detach(quantize);
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
  return std::any_of(nodes.begin(), nodes.end(), [&](NodeId n) {
    return dequantized_constants_.count(n) > 0 || dynamic_linears_.count(n) > 0;
  });
}

const DynamicInt8Weight* DequantizedView::dynamic_weight(const std::string& weight_name) const {
  const auto it = dynamic_weights_.find(weight_name);
  return it == dynamic_weights_.end() ? nullptr : &it->second;
}

}  // namespace npuflow
