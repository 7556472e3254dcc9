#include "graph/conv_transpose_matcher.h"

#include <cmath>
#include <optional>

#include "core/strings.h"
#include "graph/single_node_claims.h"

namespace npuflow {
namespace {

// An INTS attribute of `count` values, `fallback` each when absent; nullopt when it has another
// length.
std::optional<std::vector<int64_t>> ints(const NodeInfo& node, const char* name, size_t count,
                                         int64_t fallback) {
  const Attribute* attribute = node.attribute(name);
  if (attribute == nullptr || !attribute->integers) {
    return std::vector<int64_t>(count, fallback);
  }
  if (attribute->integers->size() != count) return std::nullopt;
  return *attribute->integers;
}

bool all_finite(const ConstantData& data) {
  const auto* values = static_cast<const float*>(data.data);
  for (size_t i = 0; i < data.bytes / sizeof(float); ++i) {
    if (!std::isfinite(values[i])) return false;
  }
  return true;
}

// The refusal, or nullopt with `claim` filled.
std::optional<Refusal> match_one(const GraphView& graph, NodeId id, Claim& claim) {
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
    return refuse_node(id, node, "not_2d",
                       str_cat("weight '", w.name, "' has shape ", shape_string(w.shape),
                               "; only 2-D transposed convolutions"));
  }
  const int64_t group = node.int_attribute("group", 1);
  if (group != 1) {
    return refuse_node(
        id, node, group == w.shape[0] ? "depthwise" : "grouped",
        str_cat("group=", group, ": the device's transposed convolution takes group 1 only"));
  }
  ConvTransposeSpec spec;
  spec.ic = w.shape[0];
  spec.oc = w.shape[1];
  spec.kh = w.shape[2];
  spec.kw = w.shape[3];
  if (spec.ic <= 0 || spec.oc <= 0 || spec.kh <= 0 || spec.kw <= 0 ||
      w.constant->bytes != static_cast<size_t>(spec.ic * spec.oc * spec.kh * spec.kw) * 4) {
    return refuse_node(id, node, "weight_shape",
                       str_cat("weight '", w.name, "' has shape ", shape_string(w.shape)));
  }
  if (!all_finite(*w.constant)) {
    return refuse_node(id, node, "weight_not_finite",
                       str_cat("weight '", w.name, "' holds a NaN or an infinity"));
  }
  if (x.has_shape && !x.shape.empty() &&
      (x.shape.size() != 4 || (x.shape[1] >= 0 && x.shape[1] != spec.ic))) {
    return refuse_node(id, node, "input_shape",
                       str_cat("input '", x.name, "' has shape ", shape_string(x.shape),
                               " against ", spec.ic, " input channels"));
  }
  std::string bias;
  if (b_id != kNoValue) {
    const ValueInfo& b = graph.value(b_id);
    if (!graph.is_constant(b_id) || b.type != ElementType::kFloat32 ||
        b.constant->bytes != static_cast<size_t>(spec.oc) * 4 || !all_finite(*b.constant)) {
      return refuse_node(
          id, node, "bias",
          str_cat("bias '", b.name, "' is not a finite constant float [", spec.oc, "]"));
    }
    bias = b.name;
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
  if (node.attribute("output_shape") != nullptr) {
    return refuse_node(id, node, "output_shape",
                       "an explicit output_shape (pads derived at run time)");
  }
  const auto strides = ints(node, "strides", 2, 1);
  const auto dilations = ints(node, "dilations", 2, 1);
  const auto pads = valid_padding ? std::vector<int64_t>(4, 0) : ints(node, "pads", 4, 0);
  const auto output_padding = ints(node, "output_padding", 2, 0);
  if (!strides || !dilations || !pads || !output_padding) {
    return refuse_node(id, node, "attributes",
                       "strides, dilations, pads or output_padding of a "
                       "length other than a 2-D convolution's");
  }
  if (const Attribute* shape = node.attribute("kernel_shape");
      shape && shape->integers && *shape->integers != std::vector<int64_t>{spec.kh, spec.kw}) {
    return refuse_node(id, node, "kernel_shape", "kernel_shape differs from the weight's");
  }
  spec.stride_y = (*strides)[0];
  spec.stride_x = (*strides)[1];
  spec.dil_y = (*dilations)[0];
  spec.dil_x = (*dilations)[1];
  spec.pad_top = (*pads)[0];
  spec.pad_left = (*pads)[1];
  spec.pad_bottom = (*pads)[2];
  spec.pad_right = (*pads)[3];
  spec.opad_y = (*output_padding)[0];
  spec.opad_x = (*output_padding)[1];
  if (const Status valid = check_conv_transpose_spec(spec); !valid.is_ok()) {
    return refuse_node(id, node, "attributes", valid.message());
  }
  if (std::string why = conv_transpose_contract_refusal(spec); !why.empty()) {
    return refuse_node(id, node, "device_contract", std::move(why));
  }
  claim.kind = ClaimKind::kConvTranspose;
  claim.anchor_name = node.name;
  claim.nodes = {id};
  ConvTransposeClaim& conv = claim.conv_transpose;
  conv.input = x.name;
  conv.output = graph.value(node.outputs[0]).name;
  conv.weight = w.name;
  conv.bias = bias;
  conv.spec = spec;
  // Priced as an NPU runs it (ops/conv_transpose.h): the GEMM over the input's pixels, whose
  // columns the host scatters, or (stride 1) one convolution GEMM over the output's pixels.
  const bool known =
      x.has_shape && x.shape.size() == 4 && x.shape[0] > 0 && x.shape[2] > 0 && x.shape[3] > 0;
  const int64_t taps = spec.kh * spec.kw;
  if (conv_transpose_runs_as_gemm(spec)) {
    claim.work.push_back({node.name, known ? x.shape[0] * x.shape[2] * x.shape[3] : -1, spec.ic,
                          spec.oc * taps, ElementType::kFloat16});
  } else {
    const int64_t rows =
        known ? x.shape[0] *
                    conv_transpose_extent(x.shape[2], spec.stride_y, spec.kh, spec.dil_y,
                                          spec.pad_top, spec.pad_bottom, spec.opad_y) *
                    conv_transpose_extent(x.shape[3], spec.stride_x, spec.kw, spec.dil_x,
                                          spec.pad_left, spec.pad_right, spec.opad_x)
              : -1;
    claim.work.push_back({node.name, rows, spec.ic * taps, spec.oc, ElementType::kFloat16});
  }
  return std::nullopt;
}

}  // namespace

ClaimSet match_conv_transposes(const GraphView& graph, const std::set<NodeId>& taken) {
  return match_single_nodes(graph, taken, "ConvTranspose", match_one);
}

}  // namespace npuflow
