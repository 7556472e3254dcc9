#include "graph/float_matmul_matcher.h"

#include <cmath>
#include <optional>

#include "core/strings.h"
#include "graph/single_node_claims.h"

namespace npuflow {
namespace {

// The refusal, or nullopt with `claim` filled.
std::optional<Refusal> match_one(const GraphView& graph, NodeId id, Claim& claim) {
  const NodeInfo& mm = graph.node(id);
  const ValueId w_id = mm.input(1);
  if (w_id == kNoValue || !graph.is_constant(w_id)) {
    return refuse_node(id, mm, "weight_not_constant", "the weight is not a constant initializer");
  }
  const ValueInfo& w = graph.value(w_id);
  if (w.type != ElementType::kFloat32) {
    return refuse_node(id, mm, "unsupported_type",
                       str_cat("weight '", w.name, "' is ", element_type_name(w.type)));
  }
  if (w.shape.size() != 2 || w.shape[0] <= 0 || w.shape[1] <= 0 ||
      w.constant->bytes != static_cast<size_t>(w.shape[0] * w.shape[1]) * sizeof(float)) {
    return refuse_node(id, mm, "weight_rank",
                       str_cat("weight '", w.name, "' has shape ", shape_string(w.shape),
                               "; only non-empty 2-D weights"));
  }
  const int64_t k = w.shape[0];
  const int64_t n = w.shape[1];
  if (k > kMaxIntegerMatMulK) {
    return refuse_node(id, mm, "k_too_large",
                       str_cat("K=", k, " could overflow int32 accumulation"));
  }
  const auto* values = static_cast<const float*>(w.constant->data);
  for (int64_t i = 0; i < k * n; ++i) {
    if (!std::isfinite(values[i])) {
      return refuse_node(id, mm, "weight_not_finite",
                         str_cat("weight '", w.name, "' holds a NaN or an infinity"));
    }
  }
  const ValueId a_id = mm.input(0);
  if (a_id == kNoValue) return refuse_node(id, mm, "activation_shape", "the activation is omitted");
  const ValueInfo& a = graph.value(a_id);
  if (a.type != ElementType::kFloat32) {
    return refuse_node(id, mm, "unsupported_type",
                       str_cat("activation '", a.name, "' is ", element_type_name(a.type)));
  }
  // An empty shape is an unknown one here (a scalar is no MatMul input); the node checks at run
  // time what it gets.
  if (a.has_shape && !a.shape.empty() && a.shape.back() >= 0 && a.shape.back() != k) {
    return refuse_node(
        id, mm, "activation_shape",
        str_cat("activation '", a.name, "' has shape ", shape_string(a.shape), " against K=", k));
  }
  claim.kind = ClaimKind::kFloatMatMul;
  claim.anchor_name = mm.name;
  claim.nodes = {id};
  claim.work.push_back({mm.name, leading_rows(a.shape), k, n, ElementType::kInt8});
  IntegerMatMulClaim& group = claim.integer;
  group.matmul_output = graph.value(mm.outputs[0]).name;
  group.output_name = group.matmul_output;
  group.weight_name = w.name;
  group.weight_type = ElementType::kFloat32;
  group.activation_name = a.name;
  group.activation_type = ElementType::kInt8;
  group.quantize_rows = true;
  group.spec.k = k;
  group.spec.n = n;
  group.spec.float_output = true;
  group.spec.w_zero_points = {0};
  return std::nullopt;
}

}  // namespace

ClaimSet match_float_matmuls(const GraphView& graph, const std::set<NodeId>& taken) {
  return match_single_nodes(graph, taken, "MatMul", match_one);
}

}  // namespace npuflow
