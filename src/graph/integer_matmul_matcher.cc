#include "graph/integer_matmul_matcher.h"

#include <cmath>
#include <cstring>
#include <variant>

#include "core/strings.h"
#include "graph/quant_params.h"

namespace npuflow {
namespace {

// int32 accumulation of the QDQ epilogue stays exact while K * 255 * 128 < 2^31.
constexpr int64_t kMaxQdqK = 65535;
constexpr int64_t kOnnxFloat = 1;  // TensorProto.FLOAT, Cast's `to`

using Refused = MatchRefusal;

// The sole reader of `value`, or kNoNode when it has several, none, or is a graph output.
NodeId sole_consumer(const GraphView& graph, ValueId value) {
  const ValueInfo& info = graph.value(value);
  if (info.consumers.size() != 1 || info.is_graph_output) return kNoNode;
  return info.consumers[0];
}

bool is_op(const GraphView& graph, NodeId id, const char* op) {
  return id != kNoNode && graph.node(id).op_type == op && is_onnx_domain(graph.node(id).domain);
}

// A constant float tensor of 1 or `n` elements of rank 0 or 1: it broadcasts along the output's
// last axis and never raises the output's rank.
std::optional<Refused> read_floats(const GraphView& graph, ValueId id, int64_t n, const char* what,
                                   std::vector<float>& out) {
  if (id == kNoValue) return Refused{"quant_params_not_constant", str_cat(what, " is omitted")};
  if (!graph.is_constant(id)) {
    return Refused{"quant_params_not_constant",
                   str_cat(what, " '", graph.value(id).name, "' is not a constant initializer")};
  }
  const ValueInfo& v = graph.value(id);
  const size_t count = v.constant->bytes / sizeof(float);
  if (v.type != ElementType::kFloat32 || (count != 1 && static_cast<int64_t>(count) != n) ||
      v.shape.size() > 1) {
    return Refused{"unsupported_scale_shape",
                   str_cat(what, " '", v.name, "' is ", element_type_name(v.type), " ",
                           shape_string(v.shape), " for N=", n)};
  }
  out.resize(count);
  std::memcpy(out.data(), v.constant->data, count * sizeof(float));
  return std::nullopt;
}

// A constant zero point of `type` with 1 or `n` elements (absent: 0).
std::optional<Refused> read_zero_points(const GraphView& graph, ValueId id, ElementType type,
                                        int64_t n, const char* what, std::vector<int32_t>& out) {
  out.assign(1, 0);
  if (id == kNoValue) return std::nullopt;
  if (!graph.is_constant(id)) {
    return Refused{"quant_params_not_constant",
                   str_cat(what, " '", graph.value(id).name, "' is not a constant initializer")};
  }
  const ValueInfo& v = graph.value(id);
  const size_t count = v.constant->bytes;
  if (v.type != type || (count != 1 && static_cast<int64_t>(count) != n)) {
    return Refused{"unsupported_zero_point",
                   str_cat(what, " '", v.name, "' is ", element_type_name(v.type), " with ", count,
                           " values for N=", n)};
  }
  out.resize(count);
  for (size_t i = 0; i < count; ++i) {
    out[i] = type == ElementType::kUInt8 ? static_cast<const uint8_t*>(v.constant->data)[i]
                                         : static_cast<const int8_t*>(v.constant->data)[i];
  }
  return std::nullopt;
}

bool positive_finite(const std::vector<float>& scales) {
  for (float s : scales) {
    if (!std::isfinite(s) || s <= 0.0f) return false;
  }
  return true;
}

// The constant 2-D 8-bit weight B with positive K and N.
std::optional<Refused> check_weight(const GraphView& graph, ValueId id, int64_t max_k) {
  if (id == kNoValue) return Refused{"weight_not_constant", "the weight input is omitted"};
  if (!graph.is_constant(id)) {
    return Refused{"weight_not_constant",
                   str_cat("'", graph.value(id).name, "' is not a constant initializer")};
  }
  const ValueInfo& w = graph.value(id);
  if (!is_8bit(w.type)) {
    return Refused{"unsupported_type", str_cat("weight '", w.name, "' is ",
                                               element_type_name(w.type), ", not int8/uint8")};
  }
  if (w.shape.size() != 2 || w.shape[0] <= 0 || w.shape[1] <= 0 ||
      w.constant->bytes != static_cast<size_t>(w.shape[0] * w.shape[1])) {
    return Refused{"weight_rank", str_cat("weight '", w.name, "' has shape ", shape_string(w.shape),
                                          "; only non-empty 2-D weights")};
  }
  if (w.shape[0] > max_k) {
    return Refused{"k_too_large", str_cat("K=", w.shape[0], " could overflow int32 accumulation")};
  }
  return std::nullopt;
}

// The runtime 8-bit activation A, ending in K when its shape is known (1-D included: M = 1).
std::optional<Refused> check_activation(const GraphView& graph, ValueId id, int64_t k) {
  if (id == kNoValue) return Refused{"activation_shape", "the activation input is omitted"};
  const ValueInfo& x = graph.value(id);
  if (!is_8bit(x.type)) {
    return Refused{"unsupported_type", str_cat("activation '", x.name, "' is ",
                                               element_type_name(x.type), ", not int8/uint8")};
  }
  // An empty shape is an unknown one here (a scalar A is not a valid MatMulInteger input); the
  // node checks the shape it gets at run time.
  if (x.has_shape && !x.shape.empty() && x.shape.back() >= 0 && x.shape.back() != k) {
    return Refused{"activation_shape",
                   str_cat("activation '", x.name, "' has shape ",
                           x.has_shape ? shape_string(x.shape) : "unknown", " against K=", k)};
  }
  return std::nullopt;
}

std::variant<Claim, Refused> match_matmul_integer(const GraphView& graph, NodeId id) {
  const NodeInfo& mm = graph.node(id);
  if (auto refused = check_weight(graph, mm.input(1), kMaxIntegerMatMulK)) return *refused;
  const ValueInfo& w = graph.value(mm.input(1));
  const int64_t k = w.shape[0];
  const int64_t n = w.shape[1];
  if (auto refused = check_activation(graph, mm.input(0), k)) return *refused;
  const ValueInfo& a = graph.value(mm.input(0));

  Claim claim;
  claim.kind = ClaimKind::kIntegerMatMul;
  claim.anchor_name = mm.name;
  claim.work.push_back({mm.name, leading_rows(a.shape), k, n, a.type});
  IntegerMatMulClaim& group = claim.integer;
  group.matmul_output = graph.value(mm.outputs[0]).name;
  group.weight_name = w.name;
  group.weight_type = w.type;
  group.activation_type = a.type;
  group.spec.k = k;
  group.spec.n = n;
  if (auto refused = read_zero_points(graph, mm.input(3), w.type, n, "weight zero point",
                                      group.spec.w_zero_points)) {
    return *refused;
  }

  // The activation's zero point: a constant, or output 2 of the DynamicQuantizeLinear that
  // produced A (output 0). Anything else changes per run in ways no group can describe.
  const ValueId a_zp = mm.input(2);
  const NodeId dql_id = graph.producer_if(mm.input(0), "DynamicQuantizeLinear");
  const bool dynamic = dql_id != kNoNode && a_zp != kNoValue && !graph.is_constant(a_zp) &&
                       graph.node(dql_id).outputs.size() == 3 &&
                       graph.node(dql_id).outputs[2] == a_zp &&
                       graph.node(dql_id).outputs[0] == mm.input(0);
  if (!dynamic) {
    std::vector<int32_t> zp;
    if (auto refused = read_zero_points(graph, a_zp, a.type, 1, "activation zero point", zp)) {
      if (refused->reason == "quant_params_not_constant") refused->reason = "runtime_zero_point";
      return *refused;
    }
    group.activation_zero_point = zp[0];
  }

  // The float epilogue: Cast(float) -> Mul(scale product) [-> Add(bias)], each the only reader.
  // Without a DynamicQuantizeLinear the scale has no runtime source the group knows: int32 out.
  std::vector<NodeId> epilogue_nodes;
  NodeId scale_mul_id = kNoNode;
  ValueId output = mm.outputs[0];
  const NodeId cast_id = sole_consumer(graph, mm.outputs[0]);
  if (dynamic && is_op(graph, cast_id, "Cast") &&
      graph.node(cast_id).int_attribute("to", 0) == kOnnxFloat) {
    const NodeInfo& cast = graph.node(cast_id);
    const NodeId mul_id = sole_consumer(graph, cast.outputs[0]);
    if (is_op(graph, mul_id, "Mul") && graph.node(mul_id).inputs.size() == 2) {
      const NodeInfo& mul = graph.node(mul_id);
      const ValueId scale = mul.input(0) == cast.outputs[0] ? mul.input(1) : mul.input(0);
      const NodeId product_id = graph.producer_if(scale, "Mul");
      const NodeInfo& dql = graph.node(dql_id);
      if (product_id != kNoNode && sole_consumer(graph, scale) == mul_id &&
          graph.node(product_id).inputs.size() == 2) {
        const NodeInfo& product = graph.node(product_id);
        // Mul(x_scale, W_scale) in either order.
        const int x_side = product.input(0) == dql.outputs[1]   ? 0
                           : product.input(1) == dql.outputs[1] ? 1
                                                                : -1;
        if (x_side >= 0) {
          const ValueId w_scale = product.input(1 - x_side);
          if (auto refused = read_floats(graph, w_scale, n, "weight scale", group.spec.w_scales)) {
            return *refused;
          }
          if (!positive_finite(group.spec.w_scales)) {
            return Refused{"invalid_scale", str_cat("weight scale '", graph.value(w_scale).name,
                                                    "' is not positive and finite")};
          }
          group.spec.float_output = true;
          scale_mul_id = product_id;
          epilogue_nodes = {cast_id, mul_id};
          output = mul.outputs[0];
        }
      }
    }
  }
  if (group.spec.float_output) {
    const NodeId add_id = sole_consumer(graph, output);
    if (is_op(graph, add_id, "Add") && graph.node(add_id).inputs.size() == 2) {
      const NodeInfo& add = graph.node(add_id);
      const ValueId bias = add.input(0) == output ? add.input(1) : add.input(0);
      std::vector<float> values;
      // A bias of N values only: a scalar or runtime addend stays on the CPU EP.
      if (graph.is_constant(bias) && !read_floats(graph, bias, n, "bias", values) &&
          static_cast<int64_t>(values.size()) == n) {
        group.spec.bias = std::move(values);
        epilogue_nodes.push_back(add_id);
        output = add.outputs[0];
      }
    }
  }
  group.output_name = graph.value(output).name;

  // The DynamicQuantizeLinear joins the group when nothing else reads any of its outputs.
  if (dynamic) {
    const NodeInfo& dql = graph.node(dql_id);
    auto read_only_by = [&](ValueId value, NodeId reader) {
      return sole_consumer(graph, value) == reader;
    };
    const bool scale_inside = scale_mul_id != kNoNode
                                  ? read_only_by(dql.outputs[1], scale_mul_id)
                                  : graph.value(dql.outputs[1]).consumers.empty() &&
                                        !graph.value(dql.outputs[1]).is_graph_output;
    group.quantize_inside = read_only_by(dql.outputs[0], id) && read_only_by(dql.outputs[2], id) &&
                            scale_inside && graph.value(dql.input(0)).type == ElementType::kFloat32;
    if (group.quantize_inside) {
      group.activation_name = graph.value(dql.input(0)).name;
      claim.nodes.push_back(dql_id);
    } else {
      group.activation_name = a.name;
      group.activation_zero_point_name = graph.value(a_zp).name;
      if (group.spec.float_output) group.activation_scale_name = graph.value(dql.outputs[1]).name;
    }
  } else {
    group.activation_name = a.name;
  }
  if (scale_mul_id != kNoNode) claim.nodes.push_back(scale_mul_id);
  claim.nodes.push_back(id);
  claim.nodes.insert(claim.nodes.end(), epilogue_nodes.begin(), epilogue_nodes.end());
  return claim;
}

// QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp): the QDQ group's arithmetic
// with a quantized output, so a qdq_matmul claim over the one node.
std::variant<Claim, Refused> match_qlinear_matmul(const GraphView& graph, NodeId id) {
  const NodeInfo& node = graph.node(id);
  if (node.inputs.size() < 8 || node.outputs.empty()) {
    return Refused{"malformed_node", str_cat("'", node.name, "' has ", node.inputs.size(),
                                             " inputs; QLinearMatMul takes 8")};
  }
  if (auto refused = check_weight(graph, node.input(3), kMaxQdqK)) return *refused;
  const ValueInfo& w = graph.value(node.input(3));
  const int64_t k = w.shape[0];
  const int64_t n = w.shape[1];
  if (auto refused = check_activation(graph, node.input(0), k)) return *refused;
  const ValueInfo& a = graph.value(node.input(0));
  if (!a.has_shape || a.shape.size() < 2) {
    // The QDQ node takes [.., M, K]; a 1-D or unknown-rank A stays on the CPU EP.
    return Refused{"activation_shape", str_cat("activation '", a.name, "' has no known rank >= 2")};
  }
  const ValueInfo& y = graph.value(node.outputs[0]);
  if (!is_8bit(y.type)) {
    return Refused{"unsupported_type", str_cat("output '", y.name, "' is ",
                                               element_type_name(y.type), ", not int8/uint8")};
  }
  std::vector<float> a_scale, w_scales, y_scale;
  std::vector<int32_t> a_zp, w_zp, y_zp;
  for (auto refused :
       {read_floats(graph, node.input(1), 1, "activation scale", a_scale),
        read_zero_points(graph, node.input(2), a.type, 1, "activation zero point", a_zp),
        read_floats(graph, node.input(4), n, "weight scale", w_scales),
        read_zero_points(graph, node.input(5), w.type, n, "weight zero point", w_zp),
        read_floats(graph, node.input(6), 1, "output scale", y_scale),
        read_zero_points(graph, node.input(7), y.type, 1, "output zero point", y_zp)}) {
    if (refused) return *refused;
  }
  if (!positive_finite(a_scale) || !positive_finite(w_scales) || !positive_finite(y_scale)) {
    return Refused{"invalid_scale", str_cat("a scale of '", node.name, "' is not positive")};
  }
  // One zero point per scale: the epilogue pairs them.
  if (w_zp.size() != w_scales.size()) {
    if (w_zp.size() != 1) {
      return Refused{"unsupported_zero_point",
                     str_cat("'", node.name, "' has ", w_zp.size(), " weight zero points for ",
                             w_scales.size(), " scales")};
    }
    w_zp.assign(w_scales.size(), w_zp[0]);
  }

  Claim claim;
  claim.kind = ClaimKind::kQdqMatMul;
  claim.anchor_name = node.name;
  claim.work.push_back({node.name, leading_rows(a.shape), k, n, a.type});
  claim.nodes.push_back(id);
  QdqMatMulClaim& qdq = claim.qdq;
  qdq.matmul_output = y.name;
  qdq.weight_name = w.name;
  qdq.weight_type = w.type;
  qdq.activation_name = a.name;
  qdq.activation_type = a.type;
  qdq.output_name = y.name;
  qdq.spec.k = k;
  qdq.spec.n = n;
  qdq.spec.x_scale = a_scale[0];
  qdq.spec.x_zero_point = a_zp[0];
  qdq.spec.w_scales = w_scales;
  qdq.spec.w_zero_points = w_zp;
  qdq.spec.output = QuantizedOutput{y_scale[0], y_zp[0], y.type};
  return claim;
}

}  // namespace

std::optional<DynamicInt8Linear> find_dynamic_int8_linear(const GraphView& graph,
                                                          NodeId matmul_integer) {
  if (!is_op(graph, matmul_integer, "MatMulInteger")) return std::nullopt;
  auto outcome = match_matmul_integer(graph, matmul_integer);
  const Claim* claim = std::get_if<Claim>(&outcome);
  if (claim == nullptr || !claim->integer.spec.float_output) return std::nullopt;
  // A float output implies every node below (match_matmul_integer checked each).
  const NodeInfo& mm = graph.node(matmul_integer);
  DynamicInt8Linear linear;
  linear.matmul = matmul_integer;
  linear.quantize = graph.producer_if(mm.input(0), "DynamicQuantizeLinear");
  linear.cast = sole_consumer(graph, mm.outputs[0]);
  linear.scale_mul = sole_consumer(graph, graph.node(linear.cast).outputs[0]);
  const NodeInfo& mul = graph.node(linear.scale_mul);
  const ValueId scale =
      mul.input(0) == graph.node(linear.cast).outputs[0] ? mul.input(1) : mul.input(0);
  linear.scale_product = graph.value(scale).producer;
  if (linear.quantize == kNoNode || linear.scale_product == kNoNode) return std::nullopt;
  linear.input = graph.node(linear.quantize).input(0);
  if (linear.input == kNoValue || graph.value(linear.input).type != ElementType::kFloat32)
    return std::nullopt;
  linear.weight = mm.input(1);
  linear.output = mul.outputs[0];
  linear.weight_type = claim->integer.weight_type;
  linear.k = claim->integer.spec.k;
  linear.n = claim->integer.spec.n;
  linear.w_zero_points = claim->integer.spec.w_zero_points;
  linear.w_scales = claim->integer.spec.w_scales;
  return linear;
}

ClaimSet match_integer_matmuls(const GraphView& graph, const IntegerMatcherOptions& options) {
  ClaimSet result;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const auto id = static_cast<NodeId>(i);
    const NodeInfo& node = graph.node(id);
    const bool integer = node.op_type == "MatMulInteger";
    if ((!integer && node.op_type != "QLinearMatMul") || !is_onnx_domain(node.domain)) continue;
    result.candidates++;
    if (!options.enabled) {
      result.refusals.push_back({id, node.name, "disabled_by_knob", "NPUFLOW_QDQ=0"});
      continue;
    }
    auto outcome = integer ? match_matmul_integer(graph, id) : match_qlinear_matmul(graph, id);
    if (auto* claim = std::get_if<Claim>(&outcome)) {
      result.claims.push_back(std::move(*claim));
    } else {
      const auto& refused = std::get<Refused>(outcome);
      result.refusals.push_back({id, node.name, refused.reason, refused.detail});
    }
  }
  return result;
}

}  // namespace npuflow
