#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "core/strings.h"
#include "graph/encoder/matcher.h"

namespace npuflow::encoder {

namespace {

// The probe points: x over the activation's range; a gated form also pairs each x with a few
// gate values y.
constexpr float kGates[] = {-2.0f, -0.5f, 0.7f, 1.3f, 3.0f};

float reference(EncoderActivation kind, float x) {
  switch (kind) {
    case EncoderActivation::kGeluErf:
      return 0.5f * x * (1 + std::erf(x * 0.7071067811865f));
    case EncoderActivation::kGeluTanh:
      return 0.5f * x * (1 + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x)));
    case EncoderActivation::kQuickGelu:
      return x / (1 + std::exp(-1.702f * x));
  }
  return x;
}

}  // namespace

std::optional<std::pair<ValueId, int>> Matcher::glu_half(ValueId v) const {
  const NodeId p = producer(v);
  if (!is(p, "Split") && !is(p, "Slice")) return std::nullopt;
  const NodeInfo& node = g_.node(p);
  const ValueId whole = node.input(0);
  Used probe;
  auto lin = linear(whole, probe);
  const auto dims = static_shape(whole);
  if (!lin || !dims || dims->empty() || lin->n % 2 != 0) return std::nullopt;
  const auto rank = static_cast<int64_t>(dims->size());
  const int64_t half = lin->n / 2;
  auto last_axis = [&](int64_t axis) { return (axis < 0 ? axis + rank : axis) == rank - 1; };
  if (node.op_type == "Split") {
    if (node.outputs.size() != 2 || !last_axis(node.int_attribute("axis", 0))) return std::nullopt;
    std::vector<int64_t> sizes = node.input(1) != kNoValue
                                     ? int_constant(node.input(1)).value_or(std::vector<int64_t>{0})
                                     : int_list_attribute(node, "split");
    if (!sizes.empty() && sizes != std::vector<int64_t>{half, half}) return std::nullopt;
    return std::pair{whole, v == node.outputs[0] ? 0 : 1};
  }
  auto axes = node.input(3) != kNoValue ? int_constant(node.input(3))
                                        : std::optional<std::vector<int64_t>>{};
  if (!axes || axes->size() != 1 || !last_axis((*axes)[0])) return std::nullopt;
  if (node.input(4) != kNoValue) {
    auto steps = int_constant(node.input(4));
    if (!steps || *steps != std::vector<int64_t>{1}) return std::nullopt;
  }
  auto b = shape_values(node.input(1)), e = shape_values(node.input(2));
  if (!b || !e || b->size() != 1 || e->size() != 1) return std::nullopt;
  const int64_t n = lin->n;
  const int64_t lo = std::clamp<int64_t>((*b)[0] < 0 ? (*b)[0] + n : (*b)[0], 0, n);
  const int64_t hi = std::clamp<int64_t>((*e)[0] < 0 ? (*e)[0] + n : (*e)[0], 0, n);
  if (lo == 0 && hi == half) return std::pair{whole, 0};
  if (lo == half && hi == n) return std::pair{whole, 1};
  return std::nullopt;
}

std::optional<EncoderActivation> Matcher::activation(ValueId z, ValueId& u, Used& used, Fail& why,
                                                     EncoderGlu* glu) const {
  static const std::set<std::string> kElementwise = {
      "Add", "Sub",  "Mul",      "Div",  "Pow", "Erf",        "Tanh",     "Sigmoid",  "Sqrt", "Neg",
      "Exp", "Gelu", "FastGelu", "Relu", "Abs", "Reciprocal", "Identity", "Softplus", "Clip"};
  std::vector<NodeId> nodes;
  std::set<NodeId> seen;
  std::map<ValueId, int> halves;  // a gated form's two halves of fc1's output
  std::set<NodeId> selectors;
  std::function<bool(ValueId)> visit = [&](ValueId v) -> bool {
    Used ignore;
    if (scalar(v, ignore)) return true;
    if (auto half = glu ? glu_half(v) : std::nullopt) {
      if (u != kNoValue && u != half->first) return false;
      u = half->first;
      halves[v] = half->second;
      selectors.insert(producer(v));
      return true;
    }
    if (Used probe; linear(v, probe)) {
      if (u != kNoValue && u != v) return false;
      u = v;
      return true;
    }
    const NodeId p = producer(v);
    if (p == kNoNode || !is_standard_domain(g_.node(p)) ||
        !kElementwise.count(g_.node(p).op_type)) {
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
  // A gated form reads both halves of fc1's output, and nothing else reads that output.
  const bool gated = !halves.empty();
  if (gated) {
    std::set<int> seen_halves;
    for (const auto& [value, index] : halves) seen_halves.insert(index);
    const std::vector<NodeId> readers = non_shape_consumers(u);
    if (seen_halves.size() != 2 || std::set<NodeId>(readers.begin(), readers.end()) != selectors ||
        readers.size() != selectors.size()) {
      why = {"unsupported_activation",
             "the MLP reads part of its first projection, but not as the two halves of a gate"};
      return std::nullopt;
    }
  }
  std::sort(nodes.begin(), nodes.end());
  // Evaluate on probe points: x alone, or (x, y) pairs for the two halves of a gated form.
  std::vector<float> probe, gate;
  for (int i = -40; i <= 40; ++i) {
    for (size_t j = 0; j < (gated ? std::size(kGates) : 1); ++j) {
      probe.push_back(static_cast<float>(i) * 0.15f);
      gate.push_back(gated ? kGates[j] : 1.0f);
    }
  }
  // The subgraph's output with the activated input at the probe points x and any gate at y
  // (swap: the second half is the activated one); nullopt where it holds a Clip.
  auto evaluate = [&](bool swap) -> std::optional<std::vector<float>> {
    std::map<ValueId, std::vector<float>> values;
    if (gated) {
      for (const auto& [value, index] : halves) values[value] = (index == 0) != swap ? probe : gate;
    } else {
      values[u] = probe;
    }
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
      if (op == "Clip") return std::nullopt;
      for (ValueId out : node.outputs) values[out] = r;
    }
    return values[z];
  };
  // Ungated: act(x). Gated: act(first half) * second half, or act(second) * first.
  const std::vector<EncoderGlu> forms =
      gated ? std::vector<EncoderGlu>{EncoderGlu::kActFirst, EncoderGlu::kActSecond}
            : std::vector<EncoderGlu>{EncoderGlu::kNone};
  for (EncoderGlu form : forms) {
    const auto evaluated = evaluate(form == EncoderGlu::kActSecond);
    if (!evaluated) {
      why = {"unsupported_activation", "Clip in the MLP activation"};
      return std::nullopt;
    }
    const std::vector<float>& result = *evaluated;
    for (EncoderActivation kind : {EncoderActivation::kGeluErf, EncoderActivation::kGeluTanh,
                                   EncoderActivation::kQuickGelu}) {
      float worst = 0;
      for (size_t i = 0; i < probe.size(); ++i) {
        const float x = probe[i], y = gate[i];
        const float ref = reference(kind, x) * (gated ? y : 1.0f);
        // A NaN difference (a NaN constant in the subgraph) must fail, not slip past max().
        const float diff = std::fabs(result[i] - ref) / std::max(1.0f, std::fabs(y));
        if (!(diff <= worst)) worst = diff;
      }
      if (worst < 2e-5f) {
        used.insert(used.end(), nodes.begin(), nodes.end());
        used.insert(used.end(), selectors.begin(), selectors.end());
        if (glu) *glu = form;
        return kind;
      }
    }
  }
  std::vector<std::string> ops;
  for (NodeId n : nodes) ops.push_back(g_.node(n).op_type);
  why = {"unsupported_activation", str_cat("the MLP activation (", join(ops, ","),
                                           ") is not erf GELU, tanh GELU or quick-GELU")};
  return std::nullopt;
}

}  // namespace npuflow::encoder
