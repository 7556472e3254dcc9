#include "graph/encoder/canonical.h"

#include <algorithm>
#include <cmath>

namespace npuflow::encoder {

bool CanonicalGraph::is(NodeId n, const char* op) const {
  return n != kNoNode && g_.node(n).op_type == op && is_standard_domain(g_.node(n));
}
NodeId CanonicalGraph::producer_is(ValueId v, const char* op) const {
  NodeId n = producer(v);
  return is(n, op) ? n : kNoNode;
}
bool CanonicalGraph::is_noop_cast(NodeId n) const {
  if (!is(n, "Cast")) return false;
  const NodeInfo& node = g_.node(n);
  const ElementType from = g_.value(node.input(0)).type;
  return from != ElementType::kUnknown && from == g_.value(node.outputs[0]).type;
}

ValueId CanonicalGraph::through_identity(ValueId v) const {
  ValueId origin = v;
  for (int guard = 0; guard < 8 && origin != kNoValue && !g_.is_constant(origin); ++guard) {
    const NodeId p = producer(origin);
    if (p == kNoNode || !(is(p, "Identity") || is_noop_cast(p))) break;
    origin = g_.node(p).input(0);
  }
  // Only a constant is looked through: a runtime value keeps its own name, which is what the
  // fused node receives.
  return g_.is_constant(origin) ? origin : v;
}
bool CanonicalGraph::float_constant(ValueId v) const {
  v = through_identity(v);
  return g_.is_constant(v) && g_.value(v).type == ElementType::kFloat32;
}
int64_t CanonicalGraph::float_count(ValueId v) const {
  return static_cast<int64_t>(g_.value(through_identity(v)).constant->bytes / sizeof(float));
}
const float* CanonicalGraph::float_data(ValueId v) const {
  return static_cast<const float*>(g_.value(through_identity(v)).constant->data);
}

std::optional<float> CanonicalGraph::scalar(ValueId v, Used& used) const {
  if (v == kNoValue) return std::nullopt;
  if (float_constant(v)) {
    if (float_count(v) != 1) return std::nullopt;
    return float_data(v)[0];
  }
  const NodeId p = producer(v);
  if (p == kNoNode || !is_standard_domain(g_.node(p))) return std::nullopt;
  const NodeInfo& node = g_.node(p);
  const std::string& op = node.op_type;
  // A head dim read from a shape (Cast(Slice(Shape(q)))): what exporters compute 1/sqrt(dh) from.
  if (op == "Cast" && g_.value(v).type == ElementType::kFloat32) {
    if (auto dims = shape_values(node.input(0)); dims && dims->size() == 1 && (*dims)[0] > 0) {
      used.push_back(p);
      return static_cast<float>((*dims)[0]);
    }
  }
  if (op == "Div" || op == "Mul" || op == "Pow") {
    Used inner;
    auto a = scalar(node.input(0), inner);
    auto b = a ? scalar(node.input(1), inner) : std::nullopt;
    if (!a || !b) return std::nullopt;
    used.insert(used.end(), inner.begin(), inner.end());
    used.push_back(p);
    if (op == "Pow") return std::pow(*a, *b);  // a grid side as sqrt(positions): Pow(N, 0.5)
    return op == "Div" ? *a / *b : *a * *b;
  }
  if (op != "Sqrt" && op != "Reciprocal" && op != "Cast" && op != "Identity") return std::nullopt;
  Used inner;
  auto x = scalar(node.input(0), inner);
  if (!x) return std::nullopt;
  used.insert(used.end(), inner.begin(), inner.end());
  used.push_back(p);
  if (op == "Sqrt") return std::sqrt(*x);
  if (op == "Reciprocal") return 1.0f / *x;
  return *x;
}

std::optional<std::vector<int64_t>> CanonicalGraph::int_constant(ValueId v) const {
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

std::vector<int64_t> CanonicalGraph::int_list_attribute(const NodeInfo& node,
                                                        const char* attr) const {
  if (const Attribute* a = node.attribute(attr); a && a->integers) return *a->integers;
  return {};
}

namespace {

std::optional<std::vector<int64_t>> int_arithmetic(const std::string& op,
                                                   const std::vector<int64_t>& a,
                                                   const std::vector<int64_t>& b) {
  // Elementwise with a one-element side broadcast; an unknown (-1) operand stays unknown.
  if (a.size() != b.size() && a.size() != 1 && b.size() != 1) return std::nullopt;
  const size_t n = std::max(a.size(), b.size());
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t x = a[a.size() == 1 ? 0 : i], y = b[b.size() == 1 ? 0 : i];
    if (x < 0 || y < 0) return std::nullopt;  // a symbolic dim, or a negative operand
    if (op == "Add") {
      out[i] = x + y;
    } else if (op == "Sub") {
      out[i] = x - y;
    } else if (op == "Mul") {
      out[i] = x * y;
    } else {
      if (y == 0) return std::nullopt;
      // Both non-negative: floor and truncation agree, and so do Mod's two modes.
      out[i] = op == "Mod" ? x % y : x / y;
    }
  }
  return out;
}

}  // namespace

// How deep shape_values and filled follow a shape chain: deep enough for SAM's window padding,
// (window - H % window) % window with each step cast twice.
constexpr int kMaxShapeDepth = 24;

std::optional<std::pair<int64_t, int64_t>> CanonicalGraph::filled(ValueId v, int depth) const {
  if (depth > kMaxShapeDepth || v == kNoValue) return std::nullopt;
  if (auto c = int_constant(v)) {
    if (c->empty() || std::any_of(c->begin(), c->end(), [&](int64_t x) { return x != c->front(); }))
      return std::nullopt;
    return std::pair{c->front(), static_cast<int64_t>(c->size())};
  }
  const NodeId p = producer(v);
  if (is(p, "ConstantOfShape")) {
    const Attribute* value = g_.node(p).attribute("value");
    auto dims = shape_values(g_.node(p).input(0), nullptr, depth + 1);
    const auto fill = value ? value->tensor_integers() : std::nullopt;
    if (!fill || fill->size() != 1 || !dims) return std::nullopt;
    int64_t count = 1;
    for (int64_t d : *dims) {
      if (d < 0 || d > 64) return std::nullopt;
      count *= d;
    }
    return std::pair{fill->front(), count};
  }
  if (is(p, "Mul")) {
    auto a = filled(g_.node(p).input(0), depth + 1), b = filled(g_.node(p).input(1), depth + 1);
    if (!a || !b || (a->second != b->second && a->second != 1 && b->second != 1))
      return std::nullopt;
    return std::pair{a->first * b->first, std::max(a->second, b->second)};
  }
  return std::nullopt;
}

std::optional<std::vector<int64_t>> CanonicalGraph::shape_values(ValueId v, const ShapeEnv* env,
                                                                 int depth) const {
  if (depth > kMaxShapeDepth || v == kNoValue) return std::nullopt;
  if (auto c = int_constant(v)) return c;
  const NodeId p = producer(v);
  if (p == kNoNode || !is_standard_domain(g_.node(p))) return std::nullopt;
  const NodeInfo& node = g_.node(p);
  const std::string& op = node.op_type;
  if (op == "Shape") {
    std::vector<int64_t> dims;
    if (auto it = env ? env->find(node.input(0)) : ShapeEnv::const_iterator{};
        env && it != env->end()) {
      dims = it->second;
    } else {
      auto known = static_shape(node.input(0));
      if (!known) return std::nullopt;
      dims = *known;  // unknown dims stay -1 (a Reshape infers one)
      if (!dims.empty() && dims[0] < 0) dims[0] = 1;
    }
    const auto rank = static_cast<int64_t>(dims.size());
    int64_t start = node.int_attribute("start", 0), end = node.int_attribute("end", rank);
    if (start < 0) start += rank;
    if (end < 0) end += rank;
    start = std::clamp<int64_t>(start, 0, rank);
    end = std::clamp<int64_t>(end, start, rank);
    return std::vector<int64_t>(dims.begin() + start, dims.begin() + end);
  }
  if (op == "Cast" || op == "Identity") {
    auto values = shape_values(node.input(0), env, depth + 1);
    // An integer Cast of a float scalar computed from constants (truncated, as Cast does).
    Used ignore;
    if (!values && op == "Cast" && g_.value(node.input(0)).type == ElementType::kFloat32) {
      if (auto f = scalar(node.input(0), ignore); f && std::isfinite(*f))
        values = std::vector<int64_t>{static_cast<int64_t>(*f)};
    }
    return values;
  }
  if (op == "Where") {
    // TorchScript's expand(-1) target: Where(s == -1, 1, s) with both fills as long as s, i.e.
    // s with each -1 (keep that dim) read as 1, the size Expand broadcasts it with.
    const NodeId eq = producer(node.input(0));
    auto s = shape_values(node.input(2), env, depth + 1);
    if (!s || !is(eq, "Equal")) return std::nullopt;
    const NodeInfo& e = g_.node(eq);
    const ValueId other =
        through_identity(e.input(0)) == through_identity(node.input(2))   ? e.input(1)
        : through_identity(e.input(1)) == through_identity(node.input(2)) ? e.input(0)
                                                                          : kNoValue;
    const auto n = static_cast<int64_t>(s->size());
    const auto minus_ones = filled(other, depth + 1), ones = filled(node.input(1), depth + 1);
    if (!minus_ones || *minus_ones != std::pair<int64_t, int64_t>{-1, n} || !ones ||
        *ones != std::pair<int64_t, int64_t>{1, n})
      return std::nullopt;
    for (int64_t& x : *s) x = x == -1 ? 1 : x;
    return s;
  }
  auto data = shape_values(node.input(0), env, depth + 1);
  if (!data) return std::nullopt;
  if (op == "Reshape") {  // a shape vector flattened again: the same values
    auto target = int_constant(node.input(1));
    const auto n = static_cast<int64_t>(data->size());
    if (!target || target->size() != 1 || ((*target)[0] != -1 && (*target)[0] != n))
      return std::nullopt;
    return data;
  }
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Mod") {
    // Integer arithmetic on sizes (a TorchScript `chunk(2)` computes its bounds as (n + 1) / 2,
    // SAM's window padding as (window - H % window) % window).
    auto other = shape_values(node.input(1), env, depth + 1);
    if (!other) return std::nullopt;
    return int_arithmetic(op, *data, *other);
  }
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
      auto values = shape_values(part, env, depth + 1);
      if (!values) return std::nullopt;
      out.insert(out.end(), values->begin(), values->end());
    }
    return out;
  }
  return std::nullopt;
}

std::optional<std::vector<int64_t>> CanonicalGraph::static_shape(ValueId v, int depth) const {
  const ValueInfo& info = g_.value(v);
  std::optional<std::vector<int64_t>> dims;
  if (info.has_shape) {
    dims = info.shape;
    for (int64_t& d : *dims) d = d < 0 ? -1 : d;
    if (std::find(dims->begin(), dims->end(), -1) == dims->end()) return dims;
  }
  // Fill unknown dims from the producer: a Transpose permutes its input's, a Reshape has its
  // target's (where the target is computed), elementwise and Cast ops keep their first input's.
  const NodeId p = producer(v);
  if (depth > 8 || p == kNoNode || !is_standard_domain(g_.node(p))) return dims;
  const NodeInfo& node = g_.node(p);
  std::optional<std::vector<int64_t>> derived;
  if (node.op_type == "Transpose") {
    auto in = static_shape(node.input(0), depth + 1);
    auto perm = perm_of(node);
    if (in && perm && perm->size() == in->size()) {
      derived.emplace();
      for (int64_t axis : *perm) {
        if (axis < 0 || axis >= static_cast<int64_t>(in->size())) return dims;
        derived->push_back((*in)[static_cast<size_t>(axis)]);
      }
    }
  } else if (node.op_type == "Reshape") {
    derived = shape_values(node.input(1));
    if (derived)
      for (int64_t& d : *derived) d = d <= 0 ? -1 : d;
  } else if (node.op_type == "Expand") {
    derived = shape_values(node.input(1));
    if (derived)
      for (int64_t& d : *derived) d = d <= 1 ? -1 : d;  // 1 broadcasts: the input's dim decides
  } else if (node.op_type == "Cast" || node.op_type == "Identity") {
    derived = static_shape(node.input(0), depth + 1);
  } else if (node.op_type == "Where" || node.op_type == "Mul" || node.op_type == "Div" ||
             node.op_type == "Add" || node.op_type == "Sub") {
    // ONNX broadcasting: dims aligned right; a dim is the operand's that is not 1.
    std::vector<std::optional<std::vector<int64_t>>> ins;
    size_t rank = 0;
    for (ValueId in : node.inputs) {
      ins.push_back(static_shape(in, depth + 1));
      if (!ins.back()) return dims;  // an operand of unknown rank: the result's is unknown too
      rank = std::max(rank, ins.back()->size());
    }
    derived.emplace(rank, 1);
    for (const auto& in : ins) {
      for (size_t i = 0; i < in->size(); ++i) {
        int64_t& out = (*derived)[rank - in->size() + i];
        const int64_t d = (*in)[i];
        if (d < 0 && out == 1)
          out = -1;
        else if (d > 1)
          out = d;
      }
    }
  }
  if (!derived) return dims;
  if (!dims) return derived;
  if (derived->size() != dims->size()) return dims;
  for (size_t i = 0; i < dims->size(); ++i)
    if ((*dims)[i] < 0) (*dims)[i] = (*derived)[i];
  return dims;
}

std::optional<std::vector<int64_t>> CanonicalGraph::reshape_target(const NodeInfo& reshape,
                                                                   const ShapeEnv* env) const {
  if (auto c = shape_values(reshape.input(1), env)) return c;
  const ValueInfo& y = g_.value(reshape.outputs[0]);
  if (y.has_shape) {
    std::vector<int64_t> out = y.shape;
    if (!out.empty() && out[0] < 0) out[0] = 1;
    if (std::count(out.begin(), out.end(), -1) <= 1) return out;
  }
  return std::nullopt;
}

std::vector<NodeId> CanonicalGraph::non_shape_consumers(ValueId v) const {
  std::vector<NodeId> out;
  for (NodeId c : g_.value(v).consumers) {
    if (g_.node(c).op_type != "Shape") out.push_back(c);
  }
  return out;
}

bool CanonicalGraph::is_shape_node(NodeId n) const {
  const NodeInfo& node = g_.node(n);
  if (node.op_type == "Shape" || node.op_type == "Size") return true;
  if (node.op_type == "Identity" && g_.is_constant(through_identity(node.input(0)))) return true;
  for (ValueId out : node.outputs) {
    const ElementType t = g_.value(out).type;
    if (t == ElementType::kFloat32 || t == ElementType::kFloat16) return false;
  }
  return !node.outputs.empty();
}

std::optional<std::vector<int64_t>> CanonicalGraph::perm_of(const NodeInfo& node) const {
  std::vector<int64_t> perm = int_list_attribute(node, "perm");
  if (perm.empty()) return std::nullopt;
  return perm;
}

}  // namespace npuflow::encoder
