// Rotary embeddings written across layouts. ORT's transpose optimizer may push a head Transpose
// through part of a rotation (x * cos computed before the Transpose, rotate_half(x) * sin after
// it, with a transposed copy of the sin table), and exporters add no-op Casts between the parts.
// Such a rotation is found as a region (the elementwise and layout ops between one input x and
// the Add, the tables constants), and proven by evaluating it: two probes read the canonical
// [T, head_dim] cos and sin tables off it, and a third, random one, must then match
// x cos + rotate_half(x) sin exactly as the plan computes it.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include "core/strings.h"
#include "graph/encoder/float_tensor.h"
#include "graph/encoder/matcher.h"

namespace npuflow::encoder {
namespace {

// The region's ops. Slices and Splits only as rotate_half's halves (read by Neg or Concat), so
// that the head split's own selectors stay in the chain before the region.
const std::set<std::string> kRegionOps = {"Add", "Mul", "Neg", "Concat", "Transpose", "Identity"};
const std::set<std::string> kLayoutOps = {"Transpose", "Identity"};

}  // namespace

std::optional<Chain::Rope> Matcher::region_rotary(ValueId v, std::vector<NodeId>& ops, ValueId& x,
                                                  Used& used) const {
  // The region: backward from v through elementwise and layout ops to constants and one input.
  std::set<NodeId> region;
  std::set<ValueId> inputs;
  std::vector<ValueId> stack = {v};
  std::set<ValueId> seen;
  while (!stack.empty()) {
    const ValueId w = stack.back();
    stack.pop_back();
    if (w == kNoValue || !seen.insert(w).second) continue;
    if (g_.is_constant(through_identity(w))) continue;
    const NodeId p = producer(w);
    bool inside = p != kNoNode && is_standard_domain(g_.node(p)) &&
                  (kRegionOps.count(g_.node(p).op_type) || is_noop_cast(p));
    if (is(p, "Slice") || is(p, "Split")) {
      inside = true;
      for (ValueId out : g_.node(p).outputs)
        for (NodeId c : non_shape_consumers(out)) inside &= is(c, "Neg") || is(c, "Concat");
    }
    if (!inside || region.size() > 32) {
      inputs.insert(w);
      continue;
    }
    region.insert(p);
    for (ValueId in : g_.node(p).inputs) stack.push_back(in);
  }
  if (inputs.size() != 1 || region.size() < 5) return std::nullopt;
  const ValueId root = *inputs.begin();
  // Nothing outside reads the region's input or its inner values.
  for (NodeId c : non_shape_consumers(root))
    if (!region.count(c)) return std::nullopt;
  for (NodeId n : region)
    for (ValueId out : g_.node(n).outputs)
      if (out != v)
        for (NodeId c : non_shape_consumers(out))
          if (!region.count(c)) return std::nullopt;
  // The x * cos branch: from an Add input back through layout ops to a Mul by a constant,
  // whose other operand reaches the root through layout ops alone.
  const NodeInfo& add = g_.node(producer(v));
  if (add.op_type != "Add") return std::nullopt;
  for (ValueId side : add.inputs) {
    std::vector<NodeId> after;  // layout ops between the Mul and the Add, backward
    ValueId w = side;
    for (NodeId p = producer(w);
         p != kNoNode && (kLayoutOps.count(g_.node(p).op_type) || is_noop_cast(p));
         p = producer(w)) {
      after.push_back(p);
      w = g_.node(p).input(0);
    }
    const NodeId mul = producer_is(w, "Mul");
    if (mul == kNoNode) continue;
    for (int i = 0; i < 2; ++i) {
      if (!float_constant(g_.node(mul).input(static_cast<size_t>(1 - i)))) continue;
      std::vector<NodeId> before;  // layout ops between the root and the Mul, backward
      ValueId u = g_.node(mul).input(static_cast<size_t>(i));
      for (NodeId p = producer(u);
           u != root && p != kNoNode && (kLayoutOps.count(g_.node(p).op_type) || is_noop_cast(p));
           p = producer(u)) {
        before.push_back(p);
        u = g_.node(p).input(0);
      }
      if (u != root) continue;
      Chain::Rope rope;
      rope.probed = true;
      rope.root = root;
      rope.output = v;
      rope.region.assign(region.begin(), region.end());
      ops.insert(ops.end(), after.begin(), after.end());
      ops.insert(ops.end(), before.begin(), before.end());
      rope.layout_ops = after.size() + before.size();
      used.insert(used.end(), region.begin(), region.end());
      x = root;
      return rope;
    }
  }
  return std::nullopt;
}

bool Matcher::probe_rotary(Chain::Rope& rope, const std::vector<NodeId>& layout_ops,
                           const IndexTensor& root, int64_t heads, int64_t d, int64_t tokens,
                           int64_t n, int64_t offset, Fail& why) const {
  const int64_t dh = d / heads, half = dh / 2;
  auto refuse = [&](const std::string& detail) {
    why = {"rotary_layout", detail};
    return false;
  };
  if (dh % 2 != 0) return refuse("an odd head dim cannot be rotated in halves");
  // Each root element's canonical (head, token, dim).
  struct Where {
    int64_t h, t, c;
  };
  auto decode = [&](int32_t source, Where& w) {
    const int64_t col = source % n - offset;
    w = {col / dh, source / n, col % dh};
    return col >= 0 && col < d && w.t < tokens;
  };
  std::vector<Where> at_root(root.data.size());
  for (size_t e = 0; e < root.data.size(); ++e)
    if (!decode(root.data[e], at_root[e])) return refuse("the rotation reads outside its part");
  // Where each output element comes from: the root's layout moved by the x * cos branch.
  IndexTensor moved = root;
  if (!replay(moved, layout_ops)) return refuse("the rotation's layout does not replay");
  auto run = [&](const std::function<float(const Where&)>& x) -> std::optional<FloatTensor> {
    std::map<ValueId, FloatTensor> values;
    FloatTensor& in = values[rope.root];
    in.shape = root.shape;
    for (const Where& w : at_root) in.data.push_back(x(w));
    auto get = [&](ValueId v) -> const FloatTensor* {
      if (auto it = values.find(v); it != values.end()) return &it->second;
      const ValueId c = through_identity(v);
      if (!float_constant(c)) return nullptr;
      FloatTensor t;
      t.shape = g_.value(c).shape;
      t.data.assign(float_data(c), float_data(c) + float_count(c));
      return &(values[v] = std::move(t));
    };
    std::vector<NodeId> order = rope.region;
    std::sort(order.begin(), order.end());
    for (NodeId id : order) {
      const NodeInfo& node = g_.node(id);
      const FloatTensor* a = get(node.input(0));
      if (!a) return std::nullopt;
      const std::string& op = node.op_type;
      if (op == "Add" || op == "Mul" || op == "Concat") {
        const FloatTensor* b = get(node.input(1));
        FloatTensor out;
        if (!b || node.inputs.size() != 2 ||
            !(op == "Concat" ? concat(*a, *b, node.int_attribute("axis", 0), out)
                             : broadcast(*a, *b, op == "Add", out)))
          return std::nullopt;
        values[node.outputs[0]] = std::move(out);
      } else if (op == "Neg") {
        FloatTensor out = *a;
        for (float& f : out.data) f = -f;
        values[node.outputs[0]] = std::move(out);
      } else {  // layout: replay an index tensor of the input and gather
        for (size_t o = 0; o < node.outputs.size(); ++o) {
          IndexTensor t = IndexTensor::iota(a->shape);
          if (!replay(t, {id}, static_cast<int>(o))) return std::nullopt;
          FloatTensor out;
          out.shape = t.shape;
          for (int32_t i : t.data) out.data.push_back(a->data[static_cast<size_t>(i)]);
          values[node.outputs[o]] = std::move(out);
        }
      }
    }
    auto it = values.find(rope.output);
    if (it == values.end() || it->second.shape != moved.shape) return std::nullopt;
    return it->second;
  };
  // Probe 1: x = 1 on the first half; probe 2: on the second. Then, per (t, c < half):
  // y1 = cos, y2 = -sin; per (t, c >= half): y1 = sin, y2 = cos.
  const auto y1 = run([&](const Where& w) { return w.c < half ? 1.0f : 0.0f; });
  const auto y2 = run([&](const Where& w) { return w.c < half ? 0.0f : 1.0f; });
  if (!y1 || !y2) return refuse("the rotation's region does not evaluate");
  const size_t table = static_cast<size_t>(tokens * dh);
  std::vector<float> cos(table, NAN), sin(table, NAN);
  for (size_t e = 0; e < moved.data.size(); ++e) {
    Where w;
    if (!decode(moved.data[e], w)) return refuse("the rotation writes outside its part");
    const size_t at = static_cast<size_t>(w.t * dh + w.c);
    const float c = w.c < half ? y1->data[e] : y2->data[e];
    const float s = w.c < half ? -y2->data[e] : y1->data[e];
    // One table for every head.
    if ((!std::isnan(cos[at]) && cos[at] != c) || (!std::isnan(sin[at]) && sin[at] != s))
      return refuse("the rotation's tables differ between heads");
    cos[at] = c;
    sin[at] = s;
  }
  for (size_t i = 0; i < table; ++i)
    if (std::isnan(cos[i]) || std::isnan(sin[i])) return refuse("the rotation skips elements");
  // Probe 3: random x; the region must compute the plan's rotation with those tables.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::map<std::tuple<int64_t, int64_t, int64_t>, float> x3;
  for (const Where& w : at_root) x3[{w.h, w.t, w.c}] = dist(rng);
  const auto y3 = run([&](const Where& w) { return x3[{w.h, w.t, w.c}]; });
  if (!y3) return refuse("the rotation's region does not evaluate");
  for (size_t e = 0; e < moved.data.size(); ++e) {
    Where w;
    decode(moved.data[e], w);
    const size_t at = static_cast<size_t>(w.t * dh + w.c);
    const float partner = w.c < half ? -x3[{w.h, w.t, w.c + half}] : x3[{w.h, w.t, w.c - half}];
    const float want = x3[{w.h, w.t, w.c}] * cos[at] + partner * sin[at];
    if (std::fabs(y3->data[e] - want) > 1e-5f * (1.0f + std::fabs(want)))
      return refuse("the region is no rotate_half rotation");
  }
  rope.cos_values = std::move(cos);
  rope.sin_values = std::move(sin);
  return true;
}

}  // namespace npuflow::encoder
