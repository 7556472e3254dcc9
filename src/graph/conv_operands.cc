#include "graph/conv_operands.h"

#include <cmath>

#include "core/strings.h"
#include "graph/single_node_claims.h"

namespace npuflow {
namespace {

bool all_finite(const ConstantData& data) {
  const auto* values = static_cast<const float*>(data.data);
  for (size_t i = 0; i < data.bytes / sizeof(float); ++i) {
    if (!std::isfinite(values[i])) return false;
  }
  return true;
}

}  // namespace

std::optional<std::vector<int64_t>> int_list(const NodeInfo& node, const char* name, size_t count,
                                             int64_t fallback) {
  const Attribute* attribute = node.attribute(name);
  if (attribute == nullptr || !attribute->integers) {
    return std::vector<int64_t>(count, fallback);
  }
  if (attribute->integers->size() != count) return std::nullopt;
  return *attribute->integers;
}

void claim_single_convolution(const GraphView& graph, NodeId id, const ConvOperands& operands,
                              ClaimKind kind, Claim& claim, ConvolutionRef& ref) {
  const NodeInfo& node = graph.node(id);
  claim.kind = kind;
  claim.anchor_name = node.name;
  claim.nodes = {id};
  ref.input = operands.input->name;
  ref.output = graph.value(node.outputs[0]).name;
  ref.weight = operands.weight->name;
  ref.bias = operands.bias;
}

std::optional<Refusal> read_conv_operands(const GraphView& graph, NodeId id, const char* op,
                                          int out_channel_axis, ConvOperands& out) {
  const NodeInfo& node = graph.node(id);
  const ValueId x_id = node.input(0), w_id = node.input(1), b_id = node.input(2);
  if (x_id == kNoValue || w_id == kNoValue || node.outputs.empty()) {
    return refuse_node(id, node, "operands", "the input or the weight is omitted");
  }
  const ValueInfo& x = graph.value(x_id);
  if (x.type != ElementType::kFloat32) {
    return refuse_node(id, node, "unsupported_type",
                       str_cat("input '", x.name, "' is ", element_type_name(x.type)));
  }
  if (!graph.is_constant(w_id)) {
    return refuse_node(id, node, "weight_not_constant", "the weight is not a constant initializer");
  }
  const ValueInfo& w = graph.value(w_id);
  if (w.type != ElementType::kFloat32) {
    return refuse_node(id, node, "unsupported_type",
                       str_cat("weight '", w.name, "' is ", element_type_name(w.type)));
  }
  if (w.shape.size() != 4) {
    return refuse_node(
        id, node, "not_2d",
        str_cat("weight '", w.name, "' has shape ", shape_string(w.shape), "; only 2-D ", op, "s"));
  }
  const int64_t group = node.int_attribute("group", 1);
  if (group != 1) {
    // Depthwise: one input channel per group (Conv's weight [OC][IC / group][kh][kw],
    // ConvTranspose's [IC][OC / group][kh][kw]).
    const bool depthwise = out_channel_axis == 0 ? w.shape[1] == 1 : group == w.shape[0];
    return refuse_node(id, node, depthwise ? "depthwise" : "grouped",
                       str_cat("group=", group, ": the device's ", op, " takes group 1 only"));
  }
  const int64_t count = element_count(w.shape);
  if (count <= 0 || w.constant->bytes % sizeof(float) != 0 ||
      w.constant->bytes / sizeof(float) != static_cast<size_t>(count)) {
    return refuse_node(id, node, "weight_shape",
                       str_cat("weight '", w.name, "' has shape ", shape_string(w.shape)));
  }
  if (!all_finite(*w.constant)) {
    return refuse_node(id, node, "weight_not_finite",
                       str_cat("weight '", w.name, "' holds a NaN or an infinity"));
  }
  const int64_t in_channels = w.shape[static_cast<size_t>(1 - out_channel_axis)];
  if (x.has_shape && !x.shape.empty() &&
      (x.shape.size() != 4 || (x.shape[1] >= 0 && x.shape[1] != in_channels))) {
    return refuse_node(id, node, "input_shape",
                       str_cat("input '", x.name, "' has shape ", shape_string(x.shape),
                               " against ", in_channels, " input channels"));
  }
  const int64_t out_channels = w.shape[static_cast<size_t>(out_channel_axis)];
  out.bias.clear();
  if (b_id != kNoValue) {
    const ValueInfo& b = graph.value(b_id);
    if (!graph.is_constant(b_id) || b.type != ElementType::kFloat32 ||
        b.constant->bytes != static_cast<size_t>(out_channels) * sizeof(float) ||
        !all_finite(*b.constant)) {
      return refuse_node(
          id, node, "bias",
          str_cat("bias '", b.name, "' is not a finite constant float [", out_channels, "]"));
    }
    out.bias = b.name;
  }
  // VALID pads nothing; ONNX and ONNX Runtime have disagreed on which side SAME_* pads more,
  // so those are not guessed here.
  bool valid_padding = false;
  if (const Attribute* pad = node.attribute("auto_pad");
      pad && pad->text && *pad->text != "NOTSET") {
    if (*pad->text != "VALID")
      return refuse_node(id, node, "auto_pad", str_cat("auto_pad ", *pad->text));
    valid_padding = true;
  }
  const auto strides = int_list(node, "strides", 2, 1);
  const auto dilations = int_list(node, "dilations", 2, 1);
  const auto pads = valid_padding ? std::vector<int64_t>(4, 0) : int_list(node, "pads", 4, 0);
  if (!strides || !dilations || !pads) {
    return refuse_node(id, node, "attributes",
                       "strides, dilations or pads of a length other than a 2-D convolution's");
  }
  if (const Attribute* shape = node.attribute("kernel_shape");
      shape && shape->integers &&
      *shape->integers != std::vector<int64_t>{w.shape[2], w.shape[3]}) {
    return refuse_node(id, node, "kernel_shape", "kernel_shape differs from the weight's");
  }
  out.input = &x;
  out.weight = &w;
  out.strides = *strides;
  out.dilations = *dilations;
  out.pads = *pads;
  return std::nullopt;
}

}  // namespace npuflow
