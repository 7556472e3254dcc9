#include "graph/encoder_matcher.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <set>

#include "core/strings.h"

namespace npuflow {
namespace {

struct Fail {
  std::string reason;
  std::string detail;
};

bool onnx_domain(const NodeInfo& node) {
  return node.domain.empty() || node.domain == "ai.onnx" || node.domain == "com.microsoft";
}

// A small index tensor that replays a chain of Reshape/Transpose nodes, to check that the chain
// moves data exactly as a head split (or merge, or patch flatten) must.
struct IndexTensor {
  std::vector<int64_t> shape;
  std::vector<int32_t> data;

  bool reshape(std::vector<int64_t> target) {
    int64_t known = 1, unknown = -1;
    for (size_t i = 0; i < target.size(); ++i) {
      if (target[i] == 0 && i < shape.size()) target[i] = shape[i];
      if (target[i] == -1) {
        if (unknown >= 0) return false;
        unknown = static_cast<int64_t>(i);
      } else if (target[i] <= 0) {
        return false;
      } else {
        known *= target[i];
      }
    }
    const auto total = static_cast<int64_t>(data.size());
    if (unknown >= 0) {
      if (known == 0 || total % known) return false;
      target[static_cast<size_t>(unknown)] = total / known;
    } else if (known != total) {
      return false;
    }
    shape = target;
    return true;
  }
  bool transpose(const std::vector<int64_t>& perm) {
    const size_t rank = shape.size();
    if (perm.size() != rank) return false;
    std::vector<int64_t> out_shape(rank), in_strides(rank, 1);
    for (size_t i = rank; i-- > 1;) in_strides[i - 1] = in_strides[i] * shape[i];
    for (size_t i = 0; i < rank; ++i) {
      if (perm[i] < 0 || perm[i] >= static_cast<int64_t>(rank)) return false;
      out_shape[i] = shape[static_cast<size_t>(perm[i])];
    }
    std::vector<int32_t> out(data.size());
    std::vector<int64_t> idx(rank, 0);
    for (size_t flat = 0; flat < data.size(); ++flat) {
      int64_t src = 0;
      for (size_t i = 0; i < rank; ++i) src += idx[i] * in_strides[static_cast<size_t>(perm[i])];
      out[flat] = data[static_cast<size_t>(src)];
      for (size_t i = rank; i-- > 0;) {
        if (++idx[i] < out_shape[i]) break;
        idx[i] = 0;
      }
    }
    shape = out_shape;
    data = std::move(out);
    return true;
  }
  // Keeps [start, start + len) of `axis` (Split, Slice), or drops the axis after taking one
  // index of it (Gather with a scalar index).
  bool select(int64_t axis, int64_t start, int64_t len, bool drop) {
    const auto rank = static_cast<int64_t>(shape.size());
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank || start < 0 || len <= 0 || start + len > shape[axis])
      return false;
    if (drop && len != 1) return false;
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < axis; ++i) outer *= shape[static_cast<size_t>(i)];
    for (int64_t i = axis + 1; i < rank; ++i) inner *= shape[static_cast<size_t>(i)];
    const int64_t dim = shape[static_cast<size_t>(axis)];
    std::vector<int32_t> out;
    out.reserve(static_cast<size_t>(outer * len * inner));
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t a = start; a < start + len; ++a)
        for (int64_t i = 0; i < inner; ++i)
          out.push_back(data[static_cast<size_t>((o * dim + a) * inner + i)]);
    data = std::move(out);
    if (drop)
      shape.erase(shape.begin() + axis);
    else
      shape[static_cast<size_t>(axis)] = len;
    return true;
  }
};

struct Linear {
  ValueId x = kNoValue;
  DenseRef ref;
  int64_t k = 0, n = 0;
  // ORT's Reshape -> Gemm -> Reshape whose last Reshape is not back to [..., N] (ORT merged the
  // next Reshape, e.g. a fused QKV's [B, T, 3, H, dh] view, into it): a layout op of the chain.
  NodeId reshaped_output = kNoNode;
};

struct Norm {
  ValueId x = kNoValue;
  NormRef ref;
};

class Matcher {
 public:
  Matcher(const GraphView& graph, const EncoderMatcherOptions& options)
      : g_(graph), options_(options) {}

  std::optional<Claim> match_from_conv(NodeId conv, Fail& why);

 private:
  using Used = std::vector<NodeId>;

  NodeId producer(ValueId v) const { return v == kNoValue ? kNoNode : g_.value(v).producer; }
  bool is(NodeId n, const char* op) const {
    return n != kNoNode && g_.node(n).op_type == op && onnx_domain(g_.node(n));
  }
  NodeId producer_is(ValueId v, const char* op) const {
    NodeId n = producer(v);
    return is(n, op) ? n : kNoNode;
  }
  // A constant seen through the Identity nodes the TorchScript exporter puts on deduplicated
  // initializers.
  ValueId through_identity(ValueId v) const {
    for (int guard = 0; guard < 4 && v != kNoValue && !g_.is_constant(v); ++guard) {
      const NodeId p = producer(v);
      if (p == kNoNode || g_.node(p).op_type != "Identity") break;
      v = g_.node(p).input(0);
    }
    return v;
  }
  const std::string& name(ValueId v) const { return g_.value(through_identity(v)).name; }
  bool float_constant(ValueId v) const {
    v = through_identity(v);
    return g_.is_constant(v) && g_.value(v).type == ElementType::kFloat32;
  }
  int64_t float_count(ValueId v) const {
    return static_cast<int64_t>(g_.value(through_identity(v)).constant->bytes / sizeof(float));
  }
  const float* float_data(ValueId v) const {
    return static_cast<const float*>(g_.value(through_identity(v)).constant->data);
  }

  // A float scalar: a one-element constant, or Sqrt/Reciprocal/Cast of one (the nodes join `used`).
  std::optional<float> scalar(ValueId v, Used& used) const {
    if (v == kNoValue) return std::nullopt;
    if (float_constant(v)) {
      if (float_count(v) != 1) return std::nullopt;
      return float_data(v)[0];
    }
    const NodeId p = producer(v);
    if (p == kNoNode || !onnx_domain(g_.node(p))) return std::nullopt;
    const NodeInfo& node = g_.node(p);
    if (node.op_type != "Sqrt" && node.op_type != "Reciprocal" && node.op_type != "Cast" &&
        node.op_type != "Identity") {
      return std::nullopt;
    }
    Used inner;
    auto x = scalar(node.input(0), inner);
    if (!x) return std::nullopt;
    used.insert(used.end(), inner.begin(), inner.end());
    used.push_back(p);
    if (node.op_type == "Sqrt") return std::sqrt(*x);
    if (node.op_type == "Reciprocal") return 1.0f / *x;
    return *x;
  }

  std::optional<std::vector<int64_t>> int_constant(ValueId v) const {
    if (!g_.is_constant(v)) return std::nullopt;
    const ValueInfo& info = g_.value(v);
    std::vector<int64_t> out;
    if (info.type == ElementType::kInt64) {
      const auto* p = static_cast<const int64_t*>(info.constant->data);
      out.assign(p, p + info.constant->bytes / 8);
    } else if (info.type == ElementType::kInt32) {
      const auto* p = static_cast<const int32_t*>(info.constant->data);
      out.assign(p, p + info.constant->bytes / 4);
    } else {
      return std::nullopt;
    }
    return out;
  }

  std::vector<int64_t> int_list_attribute(const NodeInfo& node, const char* attr) const {
    if (const Attribute* a = node.attribute(attr); a && a->integers) return *a->integers;
    return {};
  }

  // The value of a small int64 tensor built from shapes: constants, Shape of a value whose
  // rank is inferred (a dynamic leading batch counts as 1, other unknown dims as -1), Slice,
  // Gather, Unsqueeze, Squeeze, Cast and Concat of those.
  std::optional<std::vector<int64_t>> shape_values(ValueId v, int depth = 0) const {
    if (depth > 8 || v == kNoValue) return std::nullopt;
    if (auto c = int_constant(v)) return c;
    const NodeId p = producer(v);
    if (p == kNoNode || !onnx_domain(g_.node(p))) return std::nullopt;
    const NodeInfo& node = g_.node(p);
    const std::string& op = node.op_type;
    if (op == "Shape") {
      const ValueInfo& x = g_.value(node.input(0));
      if (!x.has_shape) return std::nullopt;
      std::vector<int64_t> dims = x.shape;  // unknown dims stay -1 (a Reshape infers one)
      if (!dims.empty() && dims[0] < 0) dims[0] = 1;
      for (int64_t& d : dims) d = d < 0 ? -1 : d;
      const auto rank = static_cast<int64_t>(dims.size());
      int64_t start = node.int_attribute("start", 0), end = node.int_attribute("end", rank);
      if (start < 0) start += rank;
      if (end < 0) end += rank;
      start = std::clamp<int64_t>(start, 0, rank);
      end = std::clamp<int64_t>(end, start, rank);
      return std::vector<int64_t>(dims.begin() + start, dims.begin() + end);
    }
    if (op == "Cast" || op == "Identity") return shape_values(node.input(0), depth + 1);
    auto data = shape_values(node.input(0), depth + 1);
    if (!data) return std::nullopt;
    if (op == "Unsqueeze" || op == "Squeeze") return data;
    if (op == "Gather") {
      auto idx = int_constant(node.input(1));
      if (!idx || node.int_attribute("axis", 0) != 0) return std::nullopt;
      std::vector<int64_t> out;
      for (int64_t i : *idx) {
        if (i < 0) i += static_cast<int64_t>(data->size());
        if (i < 0 || i >= static_cast<int64_t>(data->size())) return std::nullopt;
        out.push_back((*data)[static_cast<size_t>(i)]);
      }
      return out;
    }
    if (op == "Slice") {
      auto starts = int_constant(node.input(1));
      auto ends = int_constant(node.input(2));
      if (!starts || !ends || starts->size() != 1 || ends->size() != 1) return std::nullopt;
      if (node.input(4) != kNoValue) {
        auto steps = int_constant(node.input(4));
        if (!steps || steps->size() != 1 || (*steps)[0] != 1) return std::nullopt;
      }
      const auto n = static_cast<int64_t>(data->size());
      int64_t s = (*starts)[0], e = (*ends)[0];
      if (s < 0) s += n;
      if (e < 0) e += n;
      s = std::clamp<int64_t>(s, 0, n);
      e = std::clamp<int64_t>(e, s, n);
      return std::vector<int64_t>(data->begin() + s, data->begin() + e);
    }
    if (op == "Concat") {
      std::vector<int64_t> out;
      for (ValueId part : node.inputs) {
        auto values = shape_values(part, depth + 1);
        if (!values) return std::nullopt;
        out.insert(out.end(), values->begin(), values->end());
      }
      return out;
    }
    return std::nullopt;
  }

  // The target shape of a Reshape: computed by shape_values, or the inferred output shape.
  std::optional<std::vector<int64_t>> reshape_target(const NodeInfo& reshape) const {
    if (auto c = shape_values(reshape.input(1))) return c;
    const ValueInfo& y = g_.value(reshape.outputs[0]);
    if (y.has_shape) {
      std::vector<int64_t> out = y.shape;
      if (!out.empty() && out[0] < 0) out[0] = 1;
      if (std::count(out.begin(), out.end(), -1) <= 1) return out;
    }
    return std::nullopt;
  }

  std::optional<Linear> linear(ValueId y, Used& used, bool allow_reshaped_output = false) const {
    NodeId p = producer(y);
    if (p == kNoNode || !onnx_domain(g_.node(p))) return std::nullopt;
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
      if (auto target = reshape_target(*node); target && !target->empty() &&
                                               target->back() != lin->n) {
        if (!allow_reshaped_output) return std::nullopt;
        lin->reshaped_output = p;
      }
      lin->x = g_.node(inner).input(0);
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

  std::optional<Linear> gemm_linear(NodeId gemm, Used& used) const {
    const NodeInfo& node = g_.node(gemm);
    if (node.int_attribute("transA", 0) != 0) return std::nullopt;
    const Attribute* alpha = node.attribute("alpha");
    const Attribute* beta = node.attribute("beta");
    if ((alpha && alpha->real && *alpha->real != 1.0f) ||
        (beta && beta->real && *beta->real != 1.0f))
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

  bool last_axis_reduce(const NodeInfo& node) const {
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

  std::optional<Norm> layernorm(ValueId y, Used& used) const {
    const NodeId p = producer(y);
    if (p == kNoNode || !onnx_domain(g_.node(p))) return std::nullopt;
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

  // LayerNorms (one op or decomposed) whose input is `x`: their output values.
  std::vector<std::pair<ValueId, Norm>> forward_layernorms(ValueId x, const std::set<NodeId>& skip,
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

  // The elementwise subgraph from u (fc1's output) to z (fc2's input), identified by evaluating
  // it: erf GELU, tanh GELU or quick-GELU in any op arrangement; anything else is refused.
  std::optional<EncoderActivation> activation(ValueId z, ValueId& u, Used& used, Fail& why) const {
    static const std::set<std::string> kElementwise = {
        "Add",     "Sub",        "Mul",      "Div",      "Pow",  "Erf",      "Tanh",
        "Sigmoid", "Sqrt",       "Neg",      "Exp",      "Gelu", "FastGelu", "Relu",
        "Abs",     "Reciprocal", "Identity", "Softplus", "Clip"};
    std::vector<NodeId> nodes;
    std::set<NodeId> seen;
    std::function<bool(ValueId)> visit = [&](ValueId v) -> bool {
      Used ignore;
      if (scalar(v, ignore)) return true;
      if (Used probe; linear(v, probe)) {
        if (u != kNoValue && u != v) return false;
        u = v;
        return true;
      }
      const NodeId p = producer(v);
      if (p == kNoNode || !onnx_domain(g_.node(p)) || !kElementwise.count(g_.node(p).op_type)) {
        why = {"unsupported_activation",
               str_cat("the MLP activation reads '", name(v), "' from ",
                       p == kNoNode ? std::string("outside") : g_.node(p).op_type)};
        return false;
      }
      if (!seen.insert(p).second) return true;
      if (seen.size() > 24) return false;
      const NodeInfo& node = g_.node(p);
      if (node.op_type == "FastGelu" && node.input(1) != kNoValue) return false;
      for (ValueId in : node.inputs) {
        if (in == kNoValue) continue;
        if (!visit(in)) return false;
      }
      nodes.push_back(p);
      return true;
    };
    u = kNoValue;
    if (!visit(z) || u == kNoValue || nodes.empty()) {
      if (why.reason.empty()) why = {"unsupported_activation", "no GELU between the MLP linears"};
      return std::nullopt;
    }
    std::sort(nodes.begin(), nodes.end());
    // Evaluate on probe points.
    std::vector<float> probe;
    for (int i = -40; i <= 40; ++i) probe.push_back(static_cast<float>(i) * 0.15f);
    std::map<ValueId, std::vector<float>> values;
    values[u] = probe;
    auto get = [&](ValueId v) -> std::vector<float> {
      if (auto it = values.find(v); it != values.end()) return it->second;
      Used ignore;
      return std::vector<float>(probe.size(), *scalar(v, ignore));
    };
    for (NodeId n : nodes) {
      const NodeInfo& node = g_.node(n);
      std::vector<float> a = get(node.input(0));
      std::vector<float> b = node.inputs.size() > 1 && node.input(1) != kNoValue
                                 ? get(node.input(1))
                                 : std::vector<float>(probe.size(), 0.0f);
      std::vector<float> r(probe.size());
      const std::string& op = node.op_type;
      for (size_t i = 0; i < probe.size(); ++i) {
        const float x = a[i], y = b[i];
        if (op == "Add")
          r[i] = x + y;
        else if (op == "Sub")
          r[i] = x - y;
        else if (op == "Mul")
          r[i] = x * y;
        else if (op == "Div")
          r[i] = x / y;
        else if (op == "Pow")
          r[i] = std::pow(x, y);
        else if (op == "Erf")
          r[i] = std::erf(x);
        else if (op == "Tanh")
          r[i] = std::tanh(x);
        else if (op == "Sigmoid")
          r[i] = 1.0f / (1.0f + std::exp(-x));
        else if (op == "Sqrt")
          r[i] = std::sqrt(x);
        else if (op == "Neg")
          r[i] = -x;
        else if (op == "Exp")
          r[i] = std::exp(x);
        else if (op == "Relu")
          r[i] = std::max(x, 0.0f);
        else if (op == "Abs")
          r[i] = std::fabs(x);
        else if (op == "Reciprocal")
          r[i] = 1.0f / x;
        else if (op == "Identity")
          r[i] = x;
        else if (op == "Softplus")
          r[i] = std::log1p(std::exp(x));
        else if (op == "Clip")
          r[i] = x;  // refused below unless it is a no-op
        else if (op == "Gelu") {
          const Attribute* approx = node.attribute("approximate");
          const bool tanh = approx && approx->text && *approx->text == "tanh";
          r[i] = tanh ? 0.5f * x * (1 + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x)))
                      : 0.5f * x * (1 + std::erf(x * 0.7071067811865f));
        } else if (op == "FastGelu") {
          r[i] = 0.5f * x * (1 + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x)));
        }
      }
      if (op == "Clip") {
        why = {"unsupported_activation", "Clip in the MLP activation"};
        return std::nullopt;
      }
      for (ValueId out : node.outputs) values[out] = r;
    }
    const std::vector<float>& result = values[z];
    for (EncoderActivation kind : {EncoderActivation::kGeluErf, EncoderActivation::kGeluTanh,
                                   EncoderActivation::kQuickGelu}) {
      float worst = 0;
      for (size_t i = 0; i < probe.size(); ++i) {
        const float x = probe[i];
        float ref = 0;
        if (kind == EncoderActivation::kGeluErf)
          ref = 0.5f * x * (1 + std::erf(x * 0.7071067811865f));
        if (kind == EncoderActivation::kGeluTanh)
          ref = 0.5f * x * (1 + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x)));
        if (kind == EncoderActivation::kQuickGelu) ref = x / (1 + std::exp(-1.702f * x));
        worst = std::max(worst, std::fabs(result[i] - ref));
      }
      if (worst < 2e-5f) {
        used.insert(used.end(), nodes.begin(), nodes.end());
        return kind;
      }
    }
    std::vector<std::string> ops;
    for (NodeId n : nodes) ops.push_back(g_.node(n).op_type);
    why = {"unsupported_activation", str_cat("the MLP activation (", join(ops, ","),
                                             ") is not erf GELU, tanh GELU or quick-GELU")};
    return std::nullopt;
  }

  // Peels Reshape/Transpose (and scalar Mul/Div, folded into `scale`) back from `v` to the output
  // of a linear; returns that linear and the chain in forward order. With `allow_select`, the
  // chain may take its part of a fused QKV projection on the way: one Split output, Slice or
  // Gather (the selector), whose data input (`fused`) is read by the other parts' selectors too.
  struct Chain {
    Linear linear;
    std::vector<NodeId> ops;  // Reshape / Transpose / the selector, forward order
    NodeId selector = kNoNode;
    int split_output = 0;  // which output of a Split selector the chain reads
    ValueId fused = kNoValue;
  };
  std::optional<Chain> layout_chain(ValueId v, float& scale, Used& used, bool allow_scale,
                                    bool allow_select = true) const {
    Chain chain;
    Used local;
    for (int guard = 0; guard < 12; ++guard) {
      Used lin_used;
      if (auto lin = linear(v, lin_used, true)) {
        chain.linear = *lin;
        if (lin->reshaped_output != kNoNode) chain.ops.push_back(lin->reshaped_output);
        std::reverse(chain.ops.begin(), chain.ops.end());
        local.insert(local.end(), lin_used.begin(), lin_used.end());
        used.insert(used.end(), local.begin(), local.end());
        return chain;
      }
      const NodeId p = producer(v);
      if (p == kNoNode || !onnx_domain(g_.node(p))) return std::nullopt;
      const NodeInfo& node = g_.node(p);
      // The fused value has one reader per part: attention() checks they are q's, k's and v's.
      if (v != chain.fused && non_shape_consumers(v).size() != 1) return std::nullopt;
      if (node.op_type == "Reshape" || node.op_type == "Transpose") {
        chain.ops.push_back(p);
        local.push_back(p);
        v = node.input(0);
      } else if (allow_select && chain.selector == kNoNode &&
                 (node.op_type == "Split" || node.op_type == "Slice" || node.op_type == "Gather")) {
        chain.selector = p;
        chain.split_output = static_cast<int>(
            std::find(node.outputs.begin(), node.outputs.end(), v) - node.outputs.begin());
        chain.ops.push_back(p);
        local.push_back(p);
        v = chain.fused = node.input(0);
      } else if (allow_scale && (node.op_type == "Mul" || node.op_type == "Div")) {
        Used s;
        if (auto c = scalar(node.input(1), s)) {
          scale = node.op_type == "Mul" ? scale * *c : scale / *c;
          v = node.input(0);
        } else if (node.op_type == "Mul" && (c = scalar(node.input(0), s))) {
          scale *= *c;
          v = node.input(1);
        } else {
          return std::nullopt;
        }
        local.insert(local.end(), s.begin(), s.end());
        local.push_back(p);
      } else if (node.op_type == "Identity") {
        local.push_back(p);
        v = node.input(0);
      } else {
        return std::nullopt;
      }
    }
    return std::nullopt;
  }

  std::optional<std::vector<int64_t>> perm_of(const NodeInfo& node) const {
    std::vector<int64_t> perm = int_list_attribute(node, "perm");
    if (perm.empty()) return std::nullopt;
    return perm;
  }

  // Replays `ops` on `t`; false if a shape cannot be resolved. A selector (Split output
  // `split_output`, Slice, Gather) keeps the part of the data it reads.
  bool replay(IndexTensor& t, const std::vector<NodeId>& ops, int split_output = 0) const {
    for (NodeId n : ops) {
      const NodeInfo& node = g_.node(n);
      const auto rank = static_cast<int64_t>(t.shape.size());
      if (node.op_type == "Reshape") {
        auto target = reshape_target(node);
        if (!target || !t.reshape(*target)) return false;
      } else if (node.op_type == "Transpose") {
        auto perm = perm_of(node);
        if (!perm || !t.transpose(*perm)) return false;
      } else if (node.op_type == "Split") {
        int64_t axis = node.int_attribute("axis", 0);
        if (axis < 0) axis += rank;
        if (axis < 0 || axis >= rank) return false;
        const auto parts = static_cast<int64_t>(node.outputs.size());
        std::vector<int64_t> sizes;
        if (node.input(1) != kNoValue) {
          auto c = int_constant(node.input(1));
          if (!c) return false;
          sizes = *c;
        } else {
          sizes = int_list_attribute(node, "split");
        }
        const int64_t dim = t.shape[static_cast<size_t>(axis)];
        if (sizes.empty()) {  // equal parts (the last one smaller when it does not divide)
          const int64_t each = (dim + parts - 1) / parts;
          for (int64_t i = 0; i < parts; ++i)
            sizes.push_back(std::min(each, std::max<int64_t>(dim - i * each, 0)));
        }
        if (static_cast<int64_t>(sizes.size()) != parts || split_output >= parts) return false;
        int64_t start = 0;
        for (int i = 0; i < split_output; ++i) start += sizes[static_cast<size_t>(i)];
        if (!t.select(axis, start, sizes[static_cast<size_t>(split_output)], false)) return false;
      } else if (node.op_type == "Slice") {
        auto starts = int_constant(node.input(1));
        auto ends = int_constant(node.input(2));
        if (!starts || !ends || starts->size() != ends->size()) return false;
        std::vector<int64_t> axes;
        if (node.input(3) != kNoValue) {
          auto c = int_constant(node.input(3));
          if (!c) return false;
          axes = *c;
        } else {
          for (size_t i = 0; i < starts->size(); ++i) axes.push_back(static_cast<int64_t>(i));
        }
        if (node.input(4) != kNoValue) {
          auto steps = int_constant(node.input(4));
          if (!steps) return false;
          for (int64_t step : *steps)
            if (step != 1) return false;
        }
        if (axes.size() != starts->size()) return false;
        for (size_t i = 0; i < axes.size(); ++i) {
          int64_t axis = axes[i] < 0 ? axes[i] + rank : axes[i];
          if (axis < 0 || axis >= rank) return false;
          const int64_t dim = t.shape[static_cast<size_t>(axis)];
          int64_t b = (*starts)[i], e = (*ends)[i];
          if (b < 0) b += dim;
          if (e < 0) e += dim;
          b = std::clamp<int64_t>(b, 0, dim);
          e = std::clamp<int64_t>(e, b, dim);
          if (!t.select(axis, b, e - b, false)) return false;
        }
      } else if (node.op_type == "Gather") {
        auto index = int_constant(node.input(1));
        if (!index || index->size() != 1) return false;
        const bool scalar_index = g_.value(node.input(1)).shape.empty();
        int64_t axis = node.int_attribute("axis", 0);
        if (axis < 0) axis += rank;
        if (axis < 0 || axis >= rank) return false;
        int64_t i = (*index)[0];
        if (i < 0) i += t.shape[static_cast<size_t>(axis)];
        if (!t.select(axis, i, 1, scalar_index)) return false;
      } else {
        return false;
      }
    }
    return true;
  }

  // The head count a head-split chain implies: the third entry of its first rank-4 reshape.
  std::optional<int64_t> heads_of(const std::vector<NodeId>& ops) const {
    for (NodeId n : ops) {
      const NodeInfo& node = g_.node(n);
      if (node.op_type != "Reshape") continue;
      auto target = reshape_target(node);
      if (target && target->size() == 4 && (*target)[2] > 0) return (*target)[2];
      if (target && target->size() == 4 && (*target)[3] > 0) return -(*target)[3];  // -dh
      // A fused projection viewed as [B, T, 3, H, dh] (timm).
      if (target && target->size() == 5 && (*target)[2] == 3 && (*target)[3] > 0)
        return (*target)[3];
      if (target && target->size() == 5 && (*target)[2] == 3 && (*target)[4] > 0)
        return -(*target)[4];
    }
    return std::nullopt;
  }

  struct Attention {
    ValueId x = kNoValue;
    DenseRef q, k, v;
    int64_t d = 0;
    int64_t heads = 0;
    std::string heads_source;
    float scale = 1.0f;
    bool fused = false;  // q, k, v are column blocks of one projection
  };

  // Backward from the output projection's input: merge heads <- P @ V <- Softmax <- Q @ K^T.
  std::optional<Attention> attention(ValueId o_in, int64_t tokens, Used& used, Fail& why) const {
    Used local;
    std::vector<NodeId> merge;
    ValueId v = o_in;
    while (NodeId p = producer(v)) {
      if (p == kNoNode) break;
      const NodeInfo& node = g_.node(p);
      if ((node.op_type != "Reshape" && node.op_type != "Transpose") || !onnx_domain(node)) break;
      if (non_shape_consumers(v).size() != 1) return std::nullopt;
      merge.push_back(p);
      local.push_back(p);
      v = node.input(0);
    }
    std::reverse(merge.begin(), merge.end());
    const NodeId pv = producer_is(v, "MatMul");
    if (pv == kNoNode || merge.empty()) return std::nullopt;
    local.push_back(pv);
    ValueId probs = g_.node(pv).input(0);
    const ValueId vh = g_.node(pv).input(1);
    // softmax(..., dtype=float32).to(dtype) exports a Cast; eval-mode Dropout may stay.
    for (int guard = 0; guard < 3; ++guard) {
      const NodeId p = producer(probs);
      if (!(is(p, "Cast") || is(p, "Identity") || is(p, "Dropout")) ||
          g_.value(g_.node(p).outputs[0]).type != ElementType::kFloat32 ||
          non_shape_consumers(probs).size() != 1)
        break;
      local.push_back(p);
      probs = g_.node(p).input(0);
    }
    const NodeId softmax = producer_is(probs, "Softmax");
    if (softmax == kNoNode) {
      why = {"attention_shape", "P @ V does not read a Softmax"};
      return std::nullopt;
    }
    {
      const NodeInfo& sm = g_.node(softmax);
      const int64_t axis = sm.int_attribute("axis", -1);
      if (axis != -1 && axis != 3) {
        why = {"attention_shape", str_cat("Softmax over axis ", axis)};
        return std::nullopt;
      }
    }
    local.push_back(softmax);
    float scale = 1.0f;
    ValueId s = g_.node(softmax).input(0);
    for (int guard = 0; guard < 4; ++guard) {
      const NodeId p = producer(s);
      if (is(p, "Add")) {
        why = {"attention_mask",
               "the attention scores get an additive mask the plan cannot honour"};
        return std::nullopt;
      }
      if (!is(p, "Mul") && !is(p, "Div")) break;
      const NodeInfo& node = g_.node(p);
      Used sc;
      if (auto c = scalar(node.input(1), sc)) {
        scale = node.op_type == "Mul" ? scale * *c : scale / *c;
        s = node.input(0);
      } else if (node.op_type == "Mul" && (c = scalar(node.input(0), sc))) {
        scale *= *c;
        s = node.input(1);
      } else {
        why = {"attention_mask", "the attention scores are scaled by a tensor"};
        return std::nullopt;
      }
      local.insert(local.end(), sc.begin(), sc.end());
      local.push_back(p);
    }
    const NodeId qk = producer_is(s, "MatMul");
    if (qk == kNoNode) {
      why = {"attention_shape", "the Softmax does not read Q @ K^T"};
      return std::nullopt;
    }
    local.push_back(qk);
    auto q = layout_chain(g_.node(qk).input(0), scale, local, true);
    auto k = layout_chain(g_.node(qk).input(1), scale, local, true);
    float no_scale = 1.0f;
    auto val = layout_chain(vh, no_scale, local, false);
    if (!q || !k || !val) {
      why = {"attention_shape", "Q, K or V is not a head split of a linear projection"};
      return std::nullopt;
    }
    if (q->linear.x != k->linear.x || q->linear.x != val->linear.x) {
      why = {"attention_inputs", "Q, K and V do not read the same tensor"};
      return std::nullopt;
    }
    const int64_t d = q->linear.k;
    // Separate projections, or one fused projection whose output q, k and v each select a part
    // of (Split, Slice, or Reshape [B,T,3,H,dh] + Transpose + Gather).
    const int selectors =
        (q->selector != kNoNode) + (k->selector != kNoNode) + (val->selector != kNoNode);
    const bool fused = selectors > 0;
    if (fused) {
      if (selectors != 3 || q->fused != k->fused || q->fused != val->fused ||
          q->linear.ref.weight != k->linear.ref.weight ||
          q->linear.ref.weight != val->linear.ref.weight) {
        why = {"fused_qkv", "Q, K and V do not all select a part of the same fused projection"};
        return std::nullopt;
      }
      // Nothing but the three selectors (one Split, or three Slices/Gathers) reads the fused
      // value, and each Split output is one part.
      const std::set<NodeId> selected = {q->selector, k->selector, val->selector};
      const std::vector<NodeId> readers = non_shape_consumers(q->fused);
      if (std::set<NodeId>(readers.begin(), readers.end()) != selected ||
          readers.size() != selected.size() ||
          (selected.size() == 1 && g_.node(q->selector).outputs.size() != 3) ||
          (selected.size() != 1 && selected.size() != 3)) {
        why = {"fused_qkv", str_cat("the fused projection '", name(q->fused),
                                    "' is read by other nodes than the Q, K and V selectors")};
        return std::nullopt;
      }
      if (q->linear.n != 3 * d) {
        why = {"fused_qkv", str_cat("the fused projection has ", q->linear.n,
                                    " output columns, not 3 x hidden (", 3 * d, ")")};
        return std::nullopt;
      }
    } else if (q->linear.n != d || k->linear.n != d || val->linear.n != d) {
      why = {"attention_shape", "Q, K and V projections are not square"};
      return std::nullopt;
    }
    Attention att;
    att.x = q->linear.x;
    att.q = q->linear.ref;
    att.k = k->linear.ref;
    att.v = val->linear.ref;
    att.d = d;
    att.scale = scale;
    if (options_.heads > 0) {
      att.heads = options_.heads;
      att.heads_source = "knob";
    } else if (auto h = heads_of(q->ops)) {
      att.heads = *h > 0 ? *h : (d % -*h == 0 ? d / -*h : 0);
      att.heads_source = "graph";
    }
    if (att.heads <= 0 || d % att.heads != 0) {
      why = {"heads_unknown",
             str_cat("cannot infer the attention head count of hidden size ", d,
                     " from the graph; set NPUFLOW_HEADS (provider option 'heads') to the "
                     "model's num_attention_heads, e.g. NPUFLOW_HEADS=",
                     d % 64 == 0 ? d / 64 : 1, " if its head dim is ", d % 64 == 0 ? 64 : d)};
      return std::nullopt;
    }
    // Replay the layouts on index tensors: Q, V -> [1,H,T,dh], K -> [1,H,dh,T], merge -> [1,T,D].
    // The source is the projection's output [1,T,N] (N = 3D when fused); a part's expected
    // values are its D columns at `offset`.
    const int64_t t = tokens > 0 ? tokens : 5;
    const int64_t h = att.heads, dh = d / att.heads;
    const int64_t n = fused ? 3 * d : d;
    auto source = [&] {
      IndexTensor x;
      x.shape = {1, t, n};
      x.data.resize(static_cast<size_t>(t * n));
      for (size_t i = 0; i < x.data.size(); ++i) x.data[i] = static_cast<int32_t>(i);
      return x;
    };
    auto expect = [&](bool key, int64_t stride, int64_t offset) {
      std::vector<int32_t> out;
      for (int64_t hh = 0; hh < h; ++hh) {
        if (key) {
          for (int64_t c = 0; c < dh; ++c)
            for (int64_t tt = 0; tt < t; ++tt)
              out.push_back(static_cast<int32_t>(tt * stride + offset + hh * dh + c));
        } else {
          for (int64_t tt = 0; tt < t; ++tt)
            for (int64_t c = 0; c < dh; ++c)
              out.push_back(static_cast<int32_t>(tt * stride + offset + hh * dh + c));
        }
      }
      return out;
    };
    // A fused part is the block of D columns its replay lands in: [0,D) q, [D,2D) k, [2D,3D) v,
    // nothing else (a part of another width, straddling two blocks, or two parts swapped).
    struct Part {
      bool replayed = false;
      int64_t lo = 0, hi = 0;  // the columns it reads
    };
    auto replay_part = [&](IndexTensor& x, const Chain& chain) {
      Part part;
      part.replayed = replay(x, chain.ops, chain.split_output) && !x.data.empty();
      if (part.replayed) {
        part.lo = n;
        for (int32_t i : x.data) {
          part.lo = std::min<int64_t>(part.lo, i % n);
          part.hi = std::max<int64_t>(part.hi, i % n + 1);
        }
      }
      return part;
    };
    IndexTensor tq = source(), tk = source(), tv = source();
    const Part part_q = replay_part(tq, *q), part_k = replay_part(tk, *k),
               part_v = replay_part(tv, *val);
    if (fused && part_q.replayed && part_k.replayed && part_v.replayed) {
      const Part* parts[3] = {&part_q, &part_k, &part_v};
      const char* names[3] = {"q", "k", "v"};
      std::vector<std::string> ranges;
      bool blocks = true, ordered = true;
      for (int i = 0; i < 3; ++i) {
        ranges.push_back(str_cat(names[i], " [", parts[i]->lo, ",", parts[i]->hi, ")"));
        blocks &= parts[i]->hi - parts[i]->lo == d && parts[i]->lo % d == 0;
        ordered &= parts[i]->lo == i * d;
      }
      if (!blocks) {
        why = {"fused_qkv_split",
               str_cat("the fused projection's ", n, " columns are not split into three blocks of ",
                       d, ": ", join(ranges, ", "))};
        return std::nullopt;
      }
      if (!ordered) {
        why = {"fused_qkv_order",
               str_cat("the fused projection's blocks are not q|k|v in that order: ",
                       join(ranges, ", "))};
        return std::nullopt;
      }
      att.q.col_begin = 0;
      att.k.col_begin = d;
      att.v.col_begin = 2 * d;
      att.q.cols = att.k.cols = att.v.cols = d;
    }
    const bool ok_q = part_q.replayed && tq.data == expect(false, n, 0);
    const bool ok_k = part_k.replayed && tk.data == expect(true, n, fused ? d : 0);
    const bool ok_v = part_v.replayed && tv.data == expect(false, n, fused ? 2 * d : 0);
    IndexTensor tm;
    tm.shape = {1, h, t, dh};
    tm.data = expect(false, d, 0);
    bool ok_m = replay(tm, merge) && tm.shape.size() == 3 && tm.shape[2] == d;
    for (size_t i = 0; ok_m && i < tm.data.size(); ++i)
      ok_m = tm.data[i] == static_cast<int32_t>(i);
    if (!ok_q || !ok_k || !ok_v || !ok_m) {
      why = {"attention_layout",
             str_cat("the head split/merge does not move data as ", h, " heads of ", dh,
                     " would (q ", ok_q, " k ", ok_k, " v ", ok_v, " merge ", ok_m, ")",
                     fused ? " from a fused projection" : "",
                     att.heads_source == "knob" ? " with NPUFLOW_HEADS" : "")};
      return std::nullopt;
    }
    att.fused = fused;
    used.insert(used.end(), local.begin(), local.end());
    return att;
  }

  // One block starting at stream value h; returns the next stream value.
  std::optional<ValueId> block(ValueId h, int64_t tokens, EncoderLayerRef& layer, Used& used,
                               Fail& why) const {
    for (NodeId add1 : g_.value(h).consumers) {
      if (!is(add1, "Add")) continue;
      const NodeInfo& a1 = g_.node(add1);
      const ValueId branch = a1.input(0) == h ? a1.input(1) : a1.input(0);
      if (branch == h) continue;
      Used local;
      EncoderLayerRef L;
      // The output projection (its width fixes D for the LayerScale check).
      Used o_used;
      std::string ls1;
      ValueId o_value = branch;
      auto o = linear(o_value, o_used);
      if (!o) {
        if (NodeId mul = producer_is(branch, "Mul"); mul != kNoNode) {
          for (int side = 0; side < 2 && !o; ++side) {
            const ValueId c = g_.node(mul).input(static_cast<size_t>(side));
            const ValueId x = g_.node(mul).input(static_cast<size_t>(1 - side));
            if (!float_constant(c) || float_count(c) <= 1) continue;
            o_used.clear();
            o = linear(x, o_used);
            if (o && float_count(c) == o->n && non_shape_consumers(x).size() == 1) {
              ls1 = name(c);
              o_used.push_back(mul);
            } else {
              o.reset();
            }
          }
        }
      }
      if (!o) continue;
      local = o_used;
      L.layer_scale1 = ls1;
      L.o = o->ref;
      Fail att_why;
      auto att = attention(o->x, tokens, local, att_why);
      if (!att) {
        if (!att_why.reason.empty()) why = att_why;
        continue;
      }
      L.q = att->q;
      L.k = att->k;
      L.v = att->v;
      L.fused_qkv = att->fused;
      L.attention_scale = att->scale;
      heads_ = att->heads;
      heads_source_ = att->heads_source;
      const int64_t d = att->d;
      ValueId mid = kNoValue;
      if (att->x == h) {
        L.pre_norm = false;
        // Post-LN: LN(h + attn) is the next value.
        std::vector<Used> lu;
        auto lns = forward_layernorms(a1.outputs[0], {}, lu);
        if (lns.size() != 1) {
          why = {"block_shape", "a post-LN block without exactly one LayerNorm after its add"};
          continue;
        }
        L.norm1 = lns[0].second.ref;
        local.insert(local.end(), lu[0].begin(), lu[0].end());
        mid = lns[0].first;
      } else {
        Used ln_used;
        auto ln = layernorm(att->x, ln_used);
        if (!ln || ln->x != h) {
          why = {"block_shape", "the attention input is neither the stream nor a LayerNorm of it"};
          continue;
        }
        L.pre_norm = true;
        L.norm1 = ln->ref;
        last_norm1_ = {att->x, ln->ref};
        local.insert(local.end(), ln_used.begin(), ln_used.end());
        mid = a1.outputs[0];
      }
      local.push_back(add1);
      // The MLP.
      bool mlp_ok = false;
      ValueId next = kNoValue;
      for (NodeId add2 : g_.value(mid).consumers) {
        if (!is(add2, "Add")) continue;
        const NodeInfo& a2 = g_.node(add2);
        const ValueId b2 = a2.input(0) == mid ? a2.input(1) : a2.input(0);
        Used m_used;
        std::string ls2;
        ValueId fc2_out = b2;
        if (NodeId mul = producer_is(b2, "Mul"); mul != kNoNode) {
          for (int side = 0; side < 2; ++side) {
            const ValueId c = g_.node(mul).input(static_cast<size_t>(side));
            if (float_constant(c) && float_count(c) == d && non_shape_consumers(b2).size() == 1) {
              ls2 = name(c);
              m_used.push_back(mul);
              fc2_out = g_.node(mul).input(static_cast<size_t>(1 - side));
              break;
            }
          }
        }
        auto fc2 = linear(fc2_out, m_used);
        if (!fc2 || fc2->n != d) continue;
        ValueId u = kNoValue;
        Fail act_why;
        auto act = activation(fc2->x, u, m_used, act_why);
        if (!act) {
          why = act_why;
          continue;
        }
        auto fc1 = linear(u, m_used);
        if (!fc1 || fc1->k != d || fc1->n != fc2->k) continue;
        if (L.pre_norm) {
          auto ln = layernorm(fc1->x, m_used);
          if (!ln || ln->x != mid) {
            why = {"block_shape", "the MLP input is not a LayerNorm of the stream"};
            continue;
          }
          L.norm2 = ln->ref;
          next = a2.outputs[0];
          m_used.push_back(add2);
        } else {
          if (fc1->x != mid) continue;
          m_used.push_back(add2);
          std::vector<Used> lu;
          auto lns = forward_layernorms(a2.outputs[0], {}, lu);
          if (lns.size() != 1) continue;
          L.norm2 = lns[0].second.ref;
          m_used.insert(m_used.end(), lu[0].begin(), lu[0].end());
          next = lns[0].first;
        }
        L.fc1 = fc1->ref;
        L.fc2 = fc2->ref;
        L.layer_scale2 = ls2;
        L.activation = *act;
        local.insert(local.end(), m_used.begin(), m_used.end());
        mlp_ok = true;
        break;
      }
      if (!mlp_ok) {
        if (why.reason.empty()) why = {"block_shape", "no MLP after the attention"};
        continue;
      }
      layer = L;
      hidden_ = d;
      used.insert(used.end(), local.begin(), local.end());
      return next;
    }
    if (why.reason.empty())
      why = {"no_block", str_cat("no transformer block reads '", name(h), "'")};
    return std::nullopt;
  }

  std::vector<NodeId> non_shape_consumers(ValueId v) const {
    std::vector<NodeId> out;
    for (NodeId c : g_.value(v).consumers) {
      if (g_.node(c).op_type != "Shape") out.push_back(c);
    }
    return out;
  }

  // Shape arithmetic (no float output), or an Identity of a constant: the plan needs neither.
  bool is_shape_node(NodeId n) const {
    const NodeInfo& node = g_.node(n);
    if (node.op_type == "Shape" || node.op_type == "Size") return true;
    if (node.op_type == "Identity" && g_.is_constant(through_identity(node.input(0)))) return true;
    for (ValueId out : node.outputs) {
      const ElementType t = g_.value(out).type;
      if (t == ElementType::kFloat32 || t == ElementType::kFloat16) return false;
    }
    return !node.outputs.empty();
  }

  // Pulls in the shape arithmetic around the claim; returns a non-shape node that sits between
  // claimed nodes, or kNoNode.
  NodeId close_over(std::set<NodeId>& claimed) const {
    for (bool changed = true; changed;) {
      changed = false;
      // Shape feeders: unclaimed shape nodes read only by claimed nodes.
      for (size_t i = g_.nodes.size(); i-- > 0;) {
        const auto n = static_cast<NodeId>(i);
        if (claimed.count(n) || !is_shape_node(n)) continue;
        bool only_claimed = true;
        for (ValueId out : g_.node(n).outputs) {
          const ValueInfo& info = g_.value(out);
          if (info.is_graph_output) only_claimed = false;
          for (NodeId c : info.consumers) only_claimed &= claimed.count(c) > 0;
        }
        if (only_claimed) {
          claimed.insert(n);
          changed = true;
        }
      }
      // Nodes on a path claimed -> unclaimed -> claimed.
      std::set<NodeId> downstream;
      std::vector<NodeId> stack;
      for (NodeId n : claimed) {
        for (ValueId out : g_.node(n).outputs)
          for (NodeId c : g_.value(out).consumers)
            if (!claimed.count(c)) stack.push_back(c);
      }
      while (!stack.empty()) {
        NodeId n = stack.back();
        stack.pop_back();
        if (!downstream.insert(n).second) continue;
        for (ValueId out : g_.node(n).outputs)
          for (NodeId c : g_.value(out).consumers)
            if (!claimed.count(c)) stack.push_back(c);
      }
      for (NodeId n : downstream) {
        bool feeds_claim = false;
        std::set<NodeId> seen;
        std::vector<NodeId> forward = {n};
        while (!forward.empty() && !feeds_claim) {
          NodeId m = forward.back();
          forward.pop_back();
          if (!seen.insert(m).second) continue;
          for (ValueId out : g_.node(m).outputs)
            for (NodeId c : g_.value(out).consumers) {
              if (claimed.count(c))
                feeds_claim = true;
              else
                forward.push_back(c);
            }
        }
        if (!feeds_claim) continue;
        if (!is_shape_node(n)) return n;
        claimed.insert(n);
        changed = true;
      }
    }
    return kNoNode;
  }

  const GraphView& g_;
  const EncoderMatcherOptions& options_;
  mutable int64_t heads_ = 0;
  mutable std::string heads_source_;
  mutable int64_t hidden_ = 0;
  mutable std::pair<ValueId, NormRef> last_norm1_{kNoValue, {}};

  friend std::optional<Claim> match_encoder(const GraphView&, const EncoderMatcherOptions&, NodeId,
                                            Fail&);

 public:
  // The side operand a Concat/Add receives: a constant, a gathered constant or a runtime value.
  SideRef side(ValueId v, Used& used) const {
    SideRef ref;
    ref.present = true;
    if (float_constant(v)) {
      ref.constant = name(v);
      return ref;
    }
    const NodeId p = producer(v);
    if (is(p, "Expand") && float_constant(g_.node(p).input(0)) &&
        non_shape_consumers(v).size() == 1) {
      ref.constant = name(g_.node(p).input(0));
      used.push_back(p);
      return ref;
    }
    if (is(p, "Gather") && float_constant(g_.node(p).input(0)) &&
        int_constant(g_.node(p).input(1)) && g_.node(p).int_attribute("axis", 0) == 0 &&
        non_shape_consumers(v).size() == 1) {
      ref.constant = name(g_.node(p).input(0));
      ref.gather_indices = name(g_.node(p).input(1));
      used.push_back(p);
      return ref;
    }
    ref.runtime = name(v);
    return ref;
  }

  std::optional<Claim> run(NodeId conv_id, Fail& why, bool from_pixels) {
    VisionEncoderClaim enc;
    Used used;
    const NodeInfo& conv = g_.node(conv_id);
    const ValueId w = conv.input(1);
    if (!float_constant(w) || g_.value(w).shape.size() != 4) {
      why = {"patch_embedding", "the Conv weight is not a constant 4-D tensor"};
      return std::nullopt;
    }
    const std::vector<int64_t>& wshape = g_.value(w).shape;
    const int64_t d = wshape[0];
    if (conv.int_attribute("group", 1) != 1) {
      why = {"patch_embedding", "grouped Conv"};
      return std::nullopt;
    }
    for (const char* attr : {"pads", "dilations"}) {
      std::vector<int64_t> list = int_list_attribute(conv, attr);
      for (int64_t x : list) {
        if (x != (std::string(attr) == "pads" ? 0 : 1)) {
          why = {"patch_embedding", str_cat("Conv ", attr, " are not the default")};
          return std::nullopt;
        }
      }
    }
    if (const Attribute* pad = conv.attribute("auto_pad");
        pad && pad->text && *pad->text != "NOTSET" && *pad->text != "VALID") {
      why = {"patch_embedding", "Conv auto_pad " + *pad->text};
      return std::nullopt;
    }
    std::vector<int64_t> strides = int_list_attribute(conv, "strides");
    if (strides.size() != 2) strides = {wshape[2], wshape[3]};
    enc.patch_weight = name(w);
    if (conv.input(2) != kNoValue) {
      if (!float_constant(conv.input(2))) {
        why = {"patch_embedding", "the Conv bias is not constant"};
        return std::nullopt;
      }
      enc.patch_bias = name(conv.input(2));
    }
    enc.stride_h = strides[0];
    enc.stride_w = strides[1];
    enc.input = name(conv.input(0));
    used.push_back(conv_id);

    // Flatten the patch grid into tokens: Reshape/Flatten/Transpose to [B, P, D].
    ValueId v = conv.outputs[0];
    std::vector<NodeId> flatten;
    for (int guard = 0; guard < 4; ++guard) {
      std::vector<NodeId> data_consumers = non_shape_consumers(v);
      if (data_consumers.size() != 1) break;
      const NodeId c = data_consumers[0];
      const NodeInfo& node = g_.node(c);
      if (!onnx_domain(node) ||
          (node.op_type != "Reshape" && node.op_type != "Transpose" && node.op_type != "Flatten"))
        break;
      if (node.op_type == "Flatten") {
        why = {"patch_embedding", "Flatten to 2-D is not a token layout"};
        return std::nullopt;
      }
      flatten.push_back(c);
      used.push_back(c);
      v = node.outputs[0];
    }
    {
      const int64_t gh = 3, gw = 2;  // any grid: the layout must come out token-major
      IndexTensor t;
      t.shape = {1, d, gh, gw};
      for (int64_t c = 0; c < d; ++c)
        for (int64_t p = 0; p < gh * gw; ++p) t.data.push_back(static_cast<int32_t>(p * d + c));
      // Replaying needs reshape targets with -1/0 for the grid; a static target of the real grid
      // is resolved from the graph, so replay on the real grid when the Conv output is known.
      const ValueInfo& co = g_.value(conv.outputs[0]);
      if (co.has_shape && co.shape.size() == 4 && co.shape[2] > 0 && co.shape[3] > 0) {
        t.shape = {1, d, co.shape[2], co.shape[3]};
        t.data.clear();
        for (int64_t c = 0; c < d; ++c)
          for (int64_t p = 0; p < co.shape[2] * co.shape[3]; ++p)
            t.data.push_back(static_cast<int32_t>(p * d + c));
      }
      bool ok = replay(t, flatten) && t.shape.size() == 3 && t.shape[2] == d;
      for (size_t i = 0; ok && i < t.data.size(); ++i) ok = t.data[i] == static_cast<int32_t>(i);
      if (!ok) {
        why = {"patch_embedding", "the patch grid is not flattened token-major into [B, P, D]"};
        return std::nullopt;
      }
    }
    // Class token(s): Concat on the token axis with the patches last.
    if (non_shape_consumers(v).size() == 1 && is(non_shape_consumers(v)[0], "Concat")) {
      const NodeId c = non_shape_consumers(v)[0];
      const NodeInfo& cat = g_.node(c);
      const int64_t axis = cat.int_attribute("axis", 0);
      if ((axis != 1 && axis != -2) || cat.inputs.size() != 2 || cat.input(1) != v) {
        why = {"class_token",
               "the patches are not concatenated after one prefix on the token axis"};
        return std::nullopt;
      }
      enc.cls = side(cat.input(0), used);
      used.push_back(c);
      v = cat.outputs[0];
    }
    // Position embedding.
    if (non_shape_consumers(v).size() == 1 && is(non_shape_consumers(v)[0], "Add")) {
      const NodeId a = non_shape_consumers(v)[0];
      const NodeInfo& add = g_.node(a);
      enc.pos = side(add.input(0) == v ? add.input(1) : add.input(0), used);
      used.push_back(a);
      v = add.outputs[0];
    }
    const ValueId embedding = v;
    const ValueInfo& emb = g_.value(embedding);
    const int64_t tokens = emb.has_shape && emb.shape.size() == 3 ? emb.shape[1] : -1;

    // Blocks, after an optional pre-encoder LayerNorm (CLIP).
    std::set<NodeId> none;
    std::vector<ValueId> stream;
    ValueId h = embedding;
    Used blocks_used;
    Fail first_why;
    EncoderLayerRef layer;
    auto first = block(h, tokens, layer, blocks_used, first_why);
    std::optional<Norm> pre;
    Used pre_used;
    if (!first) {
      std::vector<Used> lu;
      auto lns = forward_layernorms(embedding, none, lu);
      for (size_t i = 0; i < lns.size() && !first; ++i) {
        Fail w2;
        blocks_used.clear();
        first = block(lns[i].first, tokens, layer, blocks_used, w2);
        if (first) {
          pre = lns[i].second;
          pre_used = lu[i];
          h = lns[i].first;
        }
      }
    }
    if (!first) {
      why = first_why;
      return std::nullopt;
    }
    // A block's first LayerNorm read outside too (e.g. CSE merged it with an identical tap norm).
    std::map<ValueId, std::pair<int, NormRef>> norm1_outputs;
    stream.push_back(h);
    enc.layers.push_back(layer);
    if (layer.pre_norm) norm1_outputs[last_norm1_.first] = {0, last_norm1_.second};
    h = *first;
    stream.push_back(h);
    for (;;) {
      Fail next_why;
      Used u;
      auto next = block(h, tokens, layer, u, next_why);
      if (next && layer.pre_norm) {
        norm1_outputs[last_norm1_.first] = {static_cast<int>(stream.size() - 1),
                                            last_norm1_.second};
      }
      if (!next) break;
      blocks_used.insert(blocks_used.end(), u.begin(), u.end());
      enc.layers.push_back(layer);
      h = *next;
      stream.push_back(h);
    }
    enc.hidden = hidden_;
    enc.heads = heads_;
    enc.heads_source = heads_source_;
    if (pre) enc.pre_norm = pre->ref;

    std::set<NodeId> claimed(used.begin(), used.end());
    claimed.insert(pre_used.begin(), pre_used.end());
    claimed.insert(blocks_used.begin(), blocks_used.end());
    std::set<ValueId> stream_set(stream.begin(), stream.end());

    // Exits: stream values read outside, and LayerNorms of stream values read outside.
    std::map<ValueId, std::pair<int, int>> exits;  // value -> (stream index, norm)
    for (size_t i = 0; i < stream.size(); ++i) {
      std::vector<Used> lu;
      auto lns = forward_layernorms(stream[i], claimed, lu);
      for (size_t j = 0; j < lns.size(); ++j) {
        const ValueInfo& out = g_.value(lns[j].first);
        bool outside = out.is_graph_output;
        for (NodeId c : out.consumers) outside |= !claimed.count(c);
        if (!outside) continue;
        claimed.insert(lu[j].begin(), lu[j].end());
        enc.exit_norms.push_back(lns[j].second.ref);
        exits[lns[j].first] = {static_cast<int>(i), static_cast<int>(enc.exit_norms.size() - 1)};
      }
    }
    if (!from_pixels) {
      // The claim starts at the first block's input: drop the embedding and pre-norm nodes.
      for (NodeId n : used) claimed.erase(n);
      for (NodeId n : pre_used) claimed.erase(n);
      enc.from_pixels = false;
      enc.input = name(stream[0]);
      enc.pre_norm.reset();
      enc.cls = {};
      enc.pos = {};
      enc.patch_weight.clear();
      enc.patch_bias.clear();
      enc.note =
          "the embedding runs on the CPU EP: its position embedding depends on the "
          "claimed tokens through a non-shape node";
    }
    if (const NodeId between = close_over(claimed); between != kNoNode) {
      why = {"interleaved_node",
             str_cat("'", g_.node(between).name, "' (", g_.node(between).op_type,
                     ") sits between claimed nodes and cannot run inside")};
      return std::nullopt;
    }
    for (NodeId n : claimed) {
      for (ValueId out : g_.node(n).outputs) {
        const ValueInfo& info = g_.value(out);
        bool outside = info.is_graph_output;
        for (NodeId c : info.consumers) outside |= !claimed.count(c);
        if (!outside || exits.count(out)) continue;
        if (stream_set.count(out)) {
          const auto idx = std::find(stream.begin(), stream.end(), out) - stream.begin();
          exits[out] = {static_cast<int>(idx), -1};
          continue;
        }
        if (auto it = norm1_outputs.find(out); it != norm1_outputs.end()) {
          enc.exit_norms.push_back(it->second.second);
          exits[out] = {it->second.first, static_cast<int>(enc.exit_norms.size() - 1)};
          continue;
        }
        if (is_shape_node(n)) continue;  // shape arithmetic read outside too: computed again there
        why = {"internal_value_escapes", str_cat("'", info.name, "' (", g_.node(n).op_type,
                                                 ") inside the encoder is also read outside it")};
        return std::nullopt;
      }
    }
    if (exits.empty()) {
      why = {"no_exit", "nothing outside reads the encoder"};
      return std::nullopt;
    }
    for (const auto& [value, where] : exits) {
      enc.exits.push_back({name(value), where.first, where.second});
    }
    // Family, from the discriminators.
    bool layer_scale = !enc.layers[0].layer_scale1.empty();
    int taps = 0;
    for (const auto& e : enc.exits) taps += e.norm >= 0 && e.stream_index > 0 ? 1 : 0;
    if (layer_scale && taps >= 4)
      enc.family = "depth_anything";
    else if (layer_scale)
      enc.family = "dinov2";
    else if (enc.pre_norm && enc.layers[0].activation == EncoderActivation::kQuickGelu)
      enc.family = "clip";
    else if (!enc.cls.present && enc.from_pixels)
      enc.family = "siglip";
    else
      enc.family = "vit";

    Claim claim;
    claim.kind = ClaimKind::kVisionEncoder;
    claim.anchor_name = conv.name;
    claim.nodes.assign(claimed.begin(), claimed.end());
    claim.encoder = std::move(enc);
    return claim;
  }
};

// The GEMMs one inference of a claimed encoder runs, from its weights' and exits' shapes: what
// `npuflow plan` prices. Rows are batch x tokens (-1 when the token count is symbolic; a symbolic
// batch counts as one image).
std::vector<GemmWork> encoder_work(const GraphView& graph, const VisionEncoderClaim& enc) {
  auto dims = [&](const DenseRef& dense) -> std::pair<int64_t, int64_t> {
    const ValueId id = graph.find_value(dense.weight);
    if (id == kNoValue || graph.value(id).shape.size() != 2) return {0, 0};
    const auto& shape = graph.value(id).shape;
    auto [k, n] = dense.transposed ? std::pair{shape[1], shape[0]} : std::pair{shape[0], shape[1]};
    return std::pair{k, dense.cols > 0 ? dense.cols : n};
  };
  int64_t rows = -1, tokens = -1, batch = -1;
  if (!enc.exits.empty()) {
    const ValueId exit = graph.find_value(enc.exits[0].value);
    if (exit != kNoValue && graph.value(exit).has_shape && graph.value(exit).shape.size() == 3) {
      // A symbolic batch counts as one image.
      const auto& shape = graph.value(exit).shape;
      tokens = shape[1];
      batch = shape[0] > 0 ? shape[0] : 1;
      rows = tokens > 0 ? batch * tokens : -1;
    }
  }
  std::vector<GemmWork> work;
  const int64_t heads = std::max<int64_t>(enc.heads, 1);
  const int64_t head_dim = enc.hidden / heads;
  const int64_t score_rows = batch > 0 && tokens > 0 ? batch * heads * tokens : -1;
  for (size_t i = 0; i < enc.layers.size(); ++i) {
    const EncoderLayerRef& layer = enc.layers[i];
    const std::string prefix = str_cat("layer", i, ".");
    const auto [qk, qn] = dims(layer.q);
    const auto [kk, kn] = dims(layer.k);
    const auto [vk, vn] = dims(layer.v);
    (void)kk;
    (void)vk;
    work.push_back({prefix + "qkv", rows, qk, qn + kn + vn, ElementType::kFloat32, false});
    // Per head: scores = Q K^T (contract head_dim), values = P V (contract tokens).
    work.push_back({prefix + "scores", score_rows, head_dim, tokens, ElementType::kFloat32, true});
    work.push_back({prefix + "values", score_rows, tokens, head_dim, ElementType::kFloat32, true});
    const auto [ok, on] = dims(layer.o);
    work.push_back({prefix + "o", rows, ok, on, ElementType::kFloat32, false});
    const auto [f1k, f1n] = dims(layer.fc1);
    work.push_back({prefix + "fc1", rows, f1k, f1n, ElementType::kFloat32, false});
    const auto [f2k, f2n] = dims(layer.fc2);
    work.push_back({prefix + "fc2", rows, f2k, f2n, ElementType::kFloat32, false});
  }
  return work;
}

}  // namespace

ClaimSet match_vision_encoders(const GraphView& graph, const EncoderMatcherOptions& options) {
  ClaimSet result;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const auto id = static_cast<NodeId>(i);
    const NodeInfo& node = graph.node(id);
    if (node.op_type != "Conv" || !onnx_domain(node)) continue;
    const ValueInfo& w = graph.value(node.input(1));
    if (!w.has_shape || w.shape.size() != 4 || node.outputs.empty()) continue;
    // A candidate patch embedding: a Conv whose output is reshaped into tokens.
    const ValueInfo& out = graph.value(node.outputs[0]);
    std::vector<NodeId> data_consumers;
    for (NodeId c : out.consumers) {
      if (graph.node(c).op_type != "Shape") data_consumers.push_back(c);
    }
    if (data_consumers.size() != 1) continue;
    const std::string& next = graph.node(data_consumers[0]).op_type;
    if (next != "Reshape" && next != "Flatten") continue;
    result.candidates++;
    if (!options.enabled) {
      result.refusals.push_back({id, node.name, "disabled_by_knob", "NPUFLOW_VISION=0"});
      continue;
    }
    Matcher matcher(graph, options);
    Fail why;
    auto claim = matcher.run(id, why, true);
    if (!claim && why.reason == "interleaved_node") {
      Matcher again(graph, options);
      Fail why2;
      claim = again.run(id, why2, false);
      if (!claim) why = why2;
    }
    if (claim) {
      claim->work = encoder_work(graph, claim->encoder);
      result.claims.push_back(std::move(*claim));
    } else {
      result.refusals.push_back({id, node.name, why.reason, why.detail});
    }
  }
  return result;
}

}  // namespace npuflow
