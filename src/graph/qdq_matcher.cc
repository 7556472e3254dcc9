#include "graph/qdq_matcher.h"

#include <cmath>
#include <cstring>
#include <variant>

#include "core/strings.h"
#include "graph/quant_params.h"

namespace npuflow {
namespace {

// int32 accumulation stays exact while K * 255 * 128 < 2^31.
constexpr int64_t kMaxExactK = 65535;

using Refused = MatchRefusal;

// Per-row activation quantization: scales (and zero points) along a leading axis of the
// activation, as constants, or runtime values the fused node reads by name.
struct ActivationQuant {
  bool per_row = false;
  std::vector<float> scales;
  std::vector<int32_t> zero_points;
  std::string scale_input, zero_point_input;
  int64_t axis = 0;  // of the activation, non-negative
};

// The axis a per-axis DequantizeLinear of `x` scales along, made non-negative; a refusal unless
// it is a leading axis (one along K weights the products inside the sum).
std::optional<Refused> leading_axis(const ValueInfo& x, int64_t axis, int64_t& out) {
  if (!x.has_shape || x.shape.size() < 2) {
    return Refused{"per_axis_activation",
                   str_cat("activation '", x.name, "' has per-axis scales and no known rank")};
  }
  const auto rank = static_cast<int64_t>(x.shape.size());
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank - 1) {
    return Refused{"per_axis_activation",
                   str_cat("activation '", x.name, "' is scaled along axis ", axis, " of rank ",
                           rank, "; only a leading (row) axis folds")};
  }
  out = axis;
  return std::nullopt;
}

std::optional<Refused> per_row_activation(const ValueInfo& x, const QuantParams& xq,
                                          ActivationQuant& out) {
  out.per_row = true;
  if (auto refused = leading_axis(x, xq.axis, out.axis)) return refused;
  const int64_t dim = x.shape[static_cast<size_t>(out.axis)];
  if (dim >= 0 && dim != static_cast<int64_t>(xq.scales.size())) {
    return Refused{"unsupported_scale_shape",
                   str_cat("activation '", x.name, "' has ", xq.scales.size(),
                           " scales for a dimension of ", dim)};
  }
  out.scales = xq.scales;
  out.zero_points = xq.zero_points;
  return std::nullopt;
}

// Scales computed at run time (dynamic per-token quantization): read from the fused node's
// inputs with each run, per tensor or along a leading axis, as their shape says then.
std::optional<Refused> runtime_activation_quant(const GraphView& graph, const NodeInfo& dq_x,
                                                const ValueInfo& x, ActivationQuant& out) {
  const ValueInfo& scale = graph.value(dq_x.input(1));
  if (scale.type != ElementType::kFloat32) {
    return Refused{"unsupported_scale_type",
                   str_cat("scale of '", dq_x.name, "' is ", element_type_name(scale.type))};
  }
  if (dq_x.int_attribute("block_size", 0) > 0) {
    return Refused{"per_axis_activation",
                   str_cat("activation '", x.name, "' is quantized in blocks; no block folds")};
  }
  out.per_row = true;
  out.scale_input = scale.name;
  const bool scalar_scale =
      scale.has_shape && element_count(scale.shape) == 1 && scale.shape.size() <= 1;
  if (!scalar_scale) {
    if (auto refused = leading_axis(x, dq_x.int_attribute("axis", 1), out.axis)) return refused;
  }
  const ValueId zp_id = dq_x.input(2);
  if (zp_id == kNoValue) {
    out.zero_points = {0};
  } else if (graph.is_constant(zp_id)) {
    const ValueInfo& zp = graph.value(zp_id);
    if (zp.type != x.type || zp.constant->bytes == 0) {
      return Refused{"unsupported_zero_point",
                     str_cat("zero point of '", dq_x.name, "' is ", element_type_name(zp.type))};
    }
    for (size_t i = 0; i < zp.constant->bytes; ++i) {
      out.zero_points.push_back(x.type == ElementType::kUInt8
                                    ? static_cast<const uint8_t*>(zp.constant->data)[i]
                                    : static_cast<const int8_t*>(zp.constant->data)[i]);
    }
  } else {
    if (graph.value(zp_id).type != x.type) {
      return Refused{"unsupported_zero_point", str_cat("zero point of '", dq_x.name, "' is ",
                                                       element_type_name(graph.value(zp_id).type))};
    }
    out.zero_point_input = graph.value(zp_id).name;
  }
  return std::nullopt;
}

// Tries one MatMul; returns a claim or the reason it is not one.
std::variant<Claim, Refused> match_one(const GraphView& graph, NodeId matmul_id) {
  const NodeInfo& matmul = graph.node(matmul_id);
  const NodeId dq_w_id = graph.producer_if(matmul.input(1), "DequantizeLinear");
  const NodeInfo& dq_w = graph.node(dq_w_id);

  // The weight.
  const ValueId w_id = dq_w.input(0);
  if (!graph.is_constant(w_id)) {
    return Refused{"weight_not_constant",
                   str_cat("'", graph.value(w_id).name, "' is not a constant initializer")};
  }
  const ValueInfo& w = graph.value(w_id);
  if (!is_8bit(w.type)) {
    return Refused{"unsupported_type", str_cat("weight '", w.name, "' is ",
                                               element_type_name(w.type), ", not int8/uint8")};
  }
  if (w.shape.size() != 2) {
    return Refused{"weight_rank", str_cat("weight '", w.name, "' has shape ", shape_string(w.shape),
                                          "; only 2-D weights fold")};
  }
  const int64_t k = w.shape[0];
  const int64_t n = w.shape[1];
  if (k <= 0 || n <= 0) {
    // Nothing to accelerate, and oneDNN divides by both while choosing a layout; the CPU EP
    // runs it (K = 0 gives zeros, N = 0 an empty output).
    return Refused{"empty_weight", str_cat("weight '", w.name, "' has shape ",
                                           shape_string(w.shape), "; K and N must be positive")};
  }
  if (k > kMaxExactK) {
    return Refused{"k_too_large", str_cat("K=", k, " could overflow int32 accumulation")};
  }
  QuantParams wq;
  if (auto refused = read_quant_params(graph, dq_w, w.type, wq)) return *refused;
  if (wq.block_size > 0) {
    return Refused{"blocked_scale", str_cat("weight '", w.name, "' has block_size=", wq.block_size,
                                            "; block scales run along K")};
  }
  if (wq.scales.size() > 1) {
    const int64_t axis = wq.axis < 0 ? wq.axis + 2 : wq.axis;
    if (axis == 0) {
      return Refused{"scale_along_k", str_cat("weight '", w.name,
                                              "' is scaled per row of K (axis 0); that "
                                              "weights products inside the sum and cannot fold")};
    }
    if (axis != 1 || static_cast<int64_t>(wq.scales.size()) != n) {
      return Refused{
          "unsupported_scale_shape",
          str_cat("weight '", w.name, "' has ", wq.scales.size(), " scales on axis ", wq.axis)};
    }
  }
  const ValueInfo& w_dq_out = graph.value(dq_w.outputs[0]);
  if (w_dq_out.consumers.size() != 1 || w_dq_out.is_graph_output) {
    return Refused{"shared_weight_dequantize",
                   str_cat("'", dq_w.name, "' feeds ", w_dq_out.consumers.size(),
                           " nodes; a fused node cannot share it")};
  }

  // The activation.
  const NodeId dq_x_id = graph.producer_if(matmul.input(0), "DequantizeLinear");
  if (dq_x_id == kNoNode) {
    return Refused{"activation_not_quantized",
                   str_cat("input A of '", matmul.name, "' does not come from a DequantizeLinear")};
  }
  const NodeInfo& dq_x = graph.node(dq_x_id);
  const ValueInfo& x = graph.value(dq_x.input(0));
  if (!is_8bit(x.type)) {
    return Refused{"unsupported_type", str_cat("activation '", x.name, "' is ",
                                               element_type_name(x.type), ", not int8/uint8")};
  }
  QuantParams xq;
  ActivationQuant row_quant;
  if (graph.is_constant(dq_x.input(1))) {
    if (auto refused = read_quant_params(graph, dq_x, x.type, xq)) return *refused;
    if (xq.block_size > 0) {
      return Refused{"per_axis_activation",
                     str_cat("activation '", x.name, "' is quantized in blocks; no block folds")};
    }
    if (xq.scales.size() > 1) {
      if (auto refused = per_row_activation(x, xq, row_quant)) return *refused;
    }
  } else if (auto refused = runtime_activation_quant(graph, dq_x, x, row_quant)) {
    return *refused;
  }
  if (x.has_shape && (x.shape.size() < 2 || (x.shape.back() >= 0 && x.shape.back() != k))) {
    return Refused{"activation_shape", str_cat("activation '", x.name, "' has shape ",
                                               shape_string(x.shape), " against K=", k)};
  }

  Claim claim;
  claim.kind = ClaimKind::kQdqMatMul;
  claim.anchor_name = matmul.name;
  claim.work.push_back({matmul.name, x.has_shape ? leading_rows(x.shape) : -1, k, n, x.type});
  QdqMatMulClaim& qdq = claim.qdq;
  qdq.matmul_output = graph.value(matmul.outputs[0]).name;
  qdq.weight_name = w.name;
  qdq.weight_type = w.type;
  qdq.activation_type = x.type;
  qdq.spec.k = k;
  qdq.spec.n = n;
  if (row_quant.per_row) {
    qdq.spec.x_per_row = true;
    qdq.x_row_scales = row_quant.scales;
    qdq.x_row_zero_points = row_quant.zero_points;
    qdq.x_scale_input = row_quant.scale_input;
    qdq.x_zero_point_input = row_quant.zero_point_input;
    qdq.x_axis = row_quant.axis;
  } else {
    qdq.spec.x_scale = xq.scales[0];
    qdq.spec.x_zero_point = xq.zero_points[0];
  }
  qdq.spec.w_scales = wq.scales;
  qdq.spec.w_zero_points = wq.zero_points;

  // A DequantizeLinear shared with other consumers stays outside; the group takes its float
  // output and recovers the integers exactly (see QdqMatMul::run_from_dequantized).
  const ValueInfo& x_dq_out = graph.value(dq_x.outputs[0]);
  qdq.activation_dequantized = x_dq_out.consumers.size() != 1 || x_dq_out.is_graph_output;
  if (qdq.activation_dequantized && !row_quant.scale_input.empty()) {
    // The group would requantize the shared DequantizeLinear's output with scales only that
    // node reads: they never reach the fused node.
    return Refused{"shared_activation_dequantize",
                   str_cat("'", dq_x.name, "' has runtime scales and feeds other nodes too")};
  }
  if (qdq.activation_dequantized) {
    qdq.activation_name = x_dq_out.name;
  } else {
    qdq.activation_name = x.name;
    claim.nodes.push_back(dq_x_id);
  }
  claim.nodes.push_back(dq_w_id);
  claim.nodes.push_back(matmul_id);

  // The optional output QuantizeLinear, folded only when it is the MatMul's sole consumer.
  const ValueInfo& y = graph.value(matmul.outputs[0]);
  qdq.output_name = y.name;
  if (y.consumers.size() == 1 && !y.is_graph_output) {
    const NodeInfo& q = graph.node(y.consumers[0]);
    const bool q_domain = is_onnx_domain(q.domain) || q.domain == "com.microsoft";
    if (q.op_type == "QuantizeLinear" && q_domain) {
      const ValueInfo& q_out = graph.value(q.outputs[0]);
      QuantParams yq;
      const auto refused = is_8bit(q_out.type) ? read_quant_params(graph, q, q_out.type, yq)
                                               : std::optional<Refused>(Refused{});
      // A QuantizeLinear this group cannot fold stays outside and runs on the CPU EP, unless
      // its parameters fit no axis at all: then the model is malformed, and the refusal says so
      // rather than claiming the nodes above an output that can only fail.
      if (refused && refused->reason == "empty_quant_params") return *refused;
      const size_t count = yq.scales.size();
      // The output has the activation's rank (a 2-D weight); unknown, only axis -1 is surely N.
      const int64_t rank = x.has_shape ? static_cast<int64_t>(x.shape.size()) : 0;
      const bool axis_is_n = yq.axis == -1 || (rank > 0 && yq.axis == rank - 1);
      if (!refused && count != 1 && axis_is_n && static_cast<int64_t>(count) != n) {
        return Refused{"unsupported_scale_shape", str_cat("output QuantizeLinear '", q.name,
                                                          "' has ", count, " scales for N=", n)};
      }
      if (!refused && count == 1 && yq.block_size == 0) {
        qdq.spec.output = QuantizedOutput{yq.scales[0], yq.zero_points[0], q_out.type};
        qdq.output_name = q_out.name;
        claim.nodes.push_back(y.consumers[0]);
      }
    }
  }
  return claim;
}

}  // namespace

ClaimSet match_qdq_matmuls(const GraphView& graph, const QdqMatcherOptions& options) {
  ClaimSet result;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const auto id = static_cast<NodeId>(i);
    const NodeInfo& node = graph.node(id);
    if (node.op_type != "MatMul" || !is_onnx_domain(node.domain)) continue;
    if (graph.producer_if(node.input(1), "DequantizeLinear") == kNoNode) continue;
    result.candidates++;
    if (!options.enabled) {
      result.refusals.push_back({id, node.name, "disabled_by_knob", "NPUFLOW_QDQ=0"});
      continue;
    }
    auto outcome = match_one(graph, id);
    if (auto* claim = std::get_if<Claim>(&outcome)) {
      result.claims.push_back(std::move(*claim));
    } else {
      const auto& refused = std::get<Refused>(outcome);
      result.refusals.push_back({id, node.name, refused.reason, refused.detail});
    }
  }
  return result;
}

const char* claim_kind_name(ClaimKind kind) {
  switch (kind) {
    case ClaimKind::kQdqMatMul:
      return "qdq_matmul";
    case ClaimKind::kVisionEncoder:
      return "vision_encoder";
    case ClaimKind::kIntegerMatMul:
      return "integer_matmul";
    case ClaimKind::kTensorProgram:
      return "tensor_program";
    case ClaimKind::kFloatMatMul:
      return "float_matmul_int8";
    case ClaimKind::kConvTranspose:
      return "conv_transpose";
    case ClaimKind::kConv:
      return "conv";
  }
  return "?";
}

}  // namespace npuflow
