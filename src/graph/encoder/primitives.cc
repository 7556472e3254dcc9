#include <algorithm>
#include <vector>

#include "graph/encoder/matcher.h"

namespace npuflow::encoder {

std::optional<Linear> Matcher::linear(ValueId y, Used& used, bool allow_reshaped_output) const {
  NodeId p = producer(y);
  if (p == kNoNode || !is_standard_domain(g_.node(p))) return std::nullopt;
  const NodeInfo* node = &g_.node(p);
  // ORT's MatMulAddFusion on a 3-D input: Reshape(x, [-1, K]) -> Gemm -> Reshape back.
  if (node->op_type == "Reshape") {
    NodeId gemm = producer_is(node->input(0), "Gemm");
    if (gemm == kNoNode) return std::nullopt;
    NodeId inner = producer_is(g_.node(gemm).input(0), "Reshape");
    if (inner == kNoNode) return std::nullopt;
    if (non_shape_consumers(node->input(0)).size() != 1) return std::nullopt;
    Used local;
    auto lin = gemm_linear(gemm, local);
    if (!lin) return std::nullopt;
    // The flatten to [rows, K] keeps rows whole only when K is the product of x's trailing dims
    // ([B, T, K], or [B, T, H, dh] when ORT folded a head merge into it); a Reshape that cuts
    // x's rows into pieces is no linear of x.
    if (const auto x_dims = static_shape(g_.node(inner).input(0)); x_dims && !x_dims->empty()) {
      bool whole_rows = false, known = true;
      int64_t suffix = 1;
      for (size_t i = x_dims->size(); i-- > 0 && known && !whole_rows;) {
        known = (*x_dims)[i] > 0;
        suffix *= (*x_dims)[i];
        whole_rows = known && suffix == lin->k;
      }
      if (known && !whole_rows) return std::nullopt;
    }
    // The reshape back is to the stream's [B, T, N] (or [rows, N]); anything else (a head split
    // merged into it, even [B, T, 1, N] for one head) is a layout op of the chain.
    // A grid [B, H, W, N] back from [B, H, W, K] keeps x's leading dims: that is a linear too.
    const auto restores_x = [&](const std::vector<int64_t>& target) {
      const auto x_dims = static_shape(g_.node(inner).input(0));
      return x_dims && x_dims->size() == target.size() && target.back() == lin->n &&
             std::equal(target.begin(), target.end() - 1, x_dims->begin(),
                        [](int64_t a, int64_t b) { return a > 0 && a == b; });
    };
    if (auto target = reshape_target(*node); target && !target->empty() &&
                                             (target->back() != lin->n || target->size() > 3) &&
                                             !restores_x(*target)) {
      if (!allow_reshaped_output) return std::nullopt;
      lin->reshaped_output = p;
    }
    lin->x = g_.node(inner).input(0);
    lin->flatten = inner;
    used.insert(used.end(), local.begin(), local.end());
    used.push_back(inner);
    used.push_back(p);
    return lin;
  }
  if (node->op_type == "Gemm") return gemm_linear(p, used);
  ValueId bias = kNoValue;
  NodeId matmul = kNoNode;
  if (node->op_type == "Add") {
    for (int side = 0; side < 2; ++side) {
      const ValueId b = node->input(static_cast<size_t>(side));
      const ValueId m = node->input(static_cast<size_t>(1 - side));
      if (float_constant(b) && producer_is(m, "MatMul") != kNoNode) {
        bias = b;
        matmul = producer(m);
      }
    }
    if (matmul == kNoNode) return std::nullopt;
    if (non_shape_consumers(g_.node(matmul).outputs[0]).size() != 1) return std::nullopt;
  } else if (node->op_type == "MatMul") {
    matmul = p;
  } else {
    return std::nullopt;
  }
  const NodeInfo& mm = g_.node(matmul);
  const ValueId w = mm.input(1);
  if (!float_constant(w) || g_.value(through_identity(w)).shape.size() != 2) return std::nullopt;
  Linear lin;
  lin.x = mm.input(0);
  lin.k = g_.value(through_identity(w)).shape[0];
  lin.n = g_.value(through_identity(w)).shape[1];
  lin.ref.weight = name(w);
  if (bias != kNoValue) {
    if (float_count(bias) != lin.n) return std::nullopt;
    lin.ref.bias = name(bias);
    used.push_back(p);
  }
  used.push_back(matmul);
  return lin;
}

std::optional<Linear> Matcher::gemm_linear(NodeId gemm, Used& used) const {
  const NodeInfo& node = g_.node(gemm);
  if (node.int_attribute("transA", 0) != 0) return std::nullopt;
  const Attribute* alpha = node.attribute("alpha");
  const Attribute* beta = node.attribute("beta");
  if ((alpha && alpha->real && *alpha->real != 1.0f) || (beta && beta->real && *beta->real != 1.0f))
    return std::nullopt;
  const ValueId w = node.input(1);
  if (!float_constant(w) || g_.value(through_identity(w)).shape.size() != 2) return std::nullopt;
  Linear lin;
  lin.x = node.input(0);
  lin.ref.transposed = node.int_attribute("transB", 0) != 0;
  const std::vector<int64_t>& wshape = g_.value(through_identity(w)).shape;
  lin.k = wshape[lin.ref.transposed ? 1 : 0];
  lin.n = wshape[lin.ref.transposed ? 0 : 1];
  lin.ref.weight = name(w);
  const ValueId c = node.input(2);
  if (c != kNoValue) {
    if (!float_constant(c) || float_count(c) != lin.n) return std::nullopt;
    lin.ref.bias = name(c);
  }
  used.push_back(gemm);
  return lin;
}

bool Matcher::last_axis_reduce(const NodeInfo& node) const {
  if (node.int_attribute("keepdims", 1) != 1) return false;
  std::vector<int64_t> axes;
  if (auto c = int_constant(node.input(1))) {
    axes = *c;
  } else if (const Attribute* a = node.attribute("axes"); a && a->integer) {
    axes = {*a->integer};
  } else {
    axes = int_list_attribute(node, "axes");
  }
  if (axes.size() != 1) return false;
  const ValueInfo& x = g_.value(node.input(0));
  return axes[0] == -1 || (x.has_shape && axes[0] == static_cast<int64_t>(x.shape.size()) - 1);
}

std::optional<Norm> Matcher::layernorm(ValueId y, Used& used) const {
  const NodeId p = producer(y);
  if (p == kNoNode || !is_standard_domain(g_.node(p))) return std::nullopt;
  const NodeInfo& node = g_.node(p);
  if (node.op_type == "LayerNormalization" || node.op_type == "SimplifiedLayerNormalization") {
    if (node.op_type != "LayerNormalization") return std::nullopt;  // RMSNorm: not a ViT
    const ValueInfo& x = g_.value(node.input(0));
    const int64_t axis = node.int_attribute("axis", -1);
    if (axis != -1 && !(x.has_shape && axis == static_cast<int64_t>(x.shape.size()) - 1))
      return std::nullopt;
    if (!float_constant(node.input(1))) return std::nullopt;
    if (node.input(2) != kNoValue && !float_constant(node.input(2))) return std::nullopt;
    for (size_t i = 1; i < node.outputs.size(); ++i) {
      const ValueInfo& extra = g_.value(node.outputs[i]);
      if (!extra.consumers.empty() || extra.is_graph_output) return std::nullopt;
    }
    Norm n;
    n.x = node.input(0);
    n.ref.gamma = name(node.input(1));
    if (node.input(2) != kNoValue) n.ref.beta = name(node.input(2));
    const Attribute* eps = node.attribute("epsilon");
    n.ref.epsilon = eps && eps->real ? *eps->real : 1e-5f;
    used.push_back(p);
    return n;
  }
  // Decomposed: ((x - mean) / sqrt(mean((x - mean)^2) + eps)) * gamma [+ beta].
  Used local;
  ValueId scaled = y;
  std::string beta;
  if (node.op_type == "Add") {
    int side = float_constant(node.input(1)) ? 1 : float_constant(node.input(0)) ? 0 : -1;
    if (side < 0) return std::nullopt;
    beta = name(node.input(static_cast<size_t>(side)));
    scaled = node.input(static_cast<size_t>(1 - side));
    local.push_back(p);
  }
  const NodeId mul = producer_is(scaled, "Mul");
  if (mul == kNoNode) return std::nullopt;
  const NodeInfo& m = g_.node(mul);
  int gside = float_constant(m.input(1)) ? 1 : float_constant(m.input(0)) ? 0 : -1;
  if (gside < 0) return std::nullopt;
  const ValueId gamma = m.input(static_cast<size_t>(gside));
  ValueId normed = m.input(static_cast<size_t>(1 - gside));
  local.push_back(mul);
  ValueId centered = kNoValue, denominator = kNoValue;
  if (NodeId div = producer_is(normed, "Div"); div != kNoNode) {
    centered = g_.node(div).input(0);
    denominator = g_.node(div).input(1);
    local.push_back(div);
  } else {
    return std::nullopt;
  }
  const NodeId sqrt = producer_is(denominator, "Sqrt");
  if (sqrt == kNoNode) return std::nullopt;
  local.push_back(sqrt);
  const NodeId add_eps = producer_is(g_.node(sqrt).input(0), "Add");
  if (add_eps == kNoNode) return std::nullopt;
  local.push_back(add_eps);
  std::optional<float> eps;
  ValueId variance = kNoValue;
  for (int side = 0; side < 2 && !eps; ++side) {
    eps = scalar(g_.node(add_eps).input(static_cast<size_t>(side)), local);
    variance = g_.node(add_eps).input(static_cast<size_t>(1 - side));
  }
  if (!eps) return std::nullopt;
  const NodeId var_mean = producer_is(variance, "ReduceMean");
  if (var_mean == kNoNode || !last_axis_reduce(g_.node(var_mean))) return std::nullopt;
  local.push_back(var_mean);
  const ValueId squared = g_.node(var_mean).input(0);
  if (NodeId pow = producer_is(squared, "Pow"); pow != kNoNode) {
    Used ignore;
    auto exponent = scalar(g_.node(pow).input(1), ignore);
    if (!exponent || *exponent != 2.0f || g_.node(pow).input(0) != centered) return std::nullopt;
    local.insert(local.end(), ignore.begin(), ignore.end());
    local.push_back(pow);
  } else if (NodeId sq = producer_is(squared, "Mul"); sq != kNoNode) {
    if (g_.node(sq).input(0) != centered || g_.node(sq).input(1) != centered) return std::nullopt;
    local.push_back(sq);
  } else {
    return std::nullopt;
  }
  const NodeId sub = producer_is(centered, "Sub");
  if (sub == kNoNode) return std::nullopt;
  const ValueId x = g_.node(sub).input(0);
  const NodeId mean = producer_is(g_.node(sub).input(1), "ReduceMean");
  if (mean == kNoNode || g_.node(mean).input(0) != x || !last_axis_reduce(g_.node(mean)))
    return std::nullopt;
  local.push_back(sub);
  local.push_back(mean);
  Norm n;
  n.x = x;
  n.ref.gamma = name(gamma);
  n.ref.beta = beta;
  n.ref.epsilon = *eps;
  used.insert(used.end(), local.begin(), local.end());
  return n;
}

std::vector<std::pair<ValueId, Norm>> Matcher::forward_layernorms(ValueId x,
                                                                  const std::set<NodeId>& skip,
                                                                  std::vector<Used>& useds) const {
  std::set<NodeId> near;
  std::vector<std::pair<NodeId, int>> frontier;
  for (NodeId c : g_.value(x).consumers) frontier.push_back({c, 0});
  while (!frontier.empty()) {
    auto [n, depth] = frontier.back();
    frontier.pop_back();
    if (!near.insert(n).second || depth >= 9) continue;
    for (ValueId out : g_.node(n).outputs) {
      for (NodeId c : g_.value(out).consumers) frontier.push_back({c, depth + 1});
    }
  }
  std::vector<std::pair<ValueId, Norm>> out;
  for (NodeId n : near) {
    if (skip.count(n) || g_.node(n).outputs.empty()) continue;
    Used used;
    auto norm = layernorm(g_.node(n).outputs[0], used);
    if (!norm || norm->x != x) continue;
    // A LayerNorm may share its normalizing nodes with a claimed one (ORT's CSE merges the
    // identical parts of a tap norm and the next block's norm); only its own tail is new.
    if (skip.count(n)) continue;
    out.push_back({g_.node(n).outputs[0], *norm});
    useds.push_back(used);
  }
  // A decomposed LayerNorm also matches without its final beta Add: keep the largest match.
  std::vector<std::pair<ValueId, Norm>> kept;
  std::vector<Used> kept_used;
  for (size_t i = 0; i < out.size(); ++i) {
    const std::set<NodeId> mine(useds[i].begin(), useds[i].end());
    bool inside_bigger = false;
    for (size_t j = 0; j < out.size() && !inside_bigger; ++j) {
      if (i == j || useds[j].size() <= useds[i].size()) continue;
      const std::set<NodeId> theirs(useds[j].begin(), useds[j].end());
      inside_bigger = std::includes(theirs.begin(), theirs.end(), mine.begin(), mine.end());
    }
    if (inside_bigger) continue;
    kept.push_back(out[i]);
    kept_used.push_back(useds[i]);
  }
  useds = std::move(kept_used);
  return kept;
}

}  // namespace npuflow::encoder
