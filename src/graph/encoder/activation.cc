#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "core/strings.h"
#include "graph/encoder/matcher.h"

namespace npuflow::encoder {

std::optional<EncoderActivation> Matcher::activation(ValueId z, ValueId& u, Used& used,
                                                     Fail& why) const {
  static const std::set<std::string> kElementwise = {
      "Add", "Sub",  "Mul",      "Div",  "Pow", "Erf",        "Tanh",     "Sigmoid",  "Sqrt", "Neg",
      "Exp", "Gelu", "FastGelu", "Relu", "Abs", "Reciprocal", "Identity", "Softplus", "Clip"};
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
  for (EncoderActivation kind :
       {EncoderActivation::kGeluErf, EncoderActivation::kGeluTanh, EncoderActivation::kQuickGelu}) {
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

}  // namespace npuflow::encoder
