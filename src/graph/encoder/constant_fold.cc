// Folding a float subgraph of constants at match time, for side operands a plan takes as data:
// TorchScript's dynamic DINOv2 export computes its position embedding from the table through
// Reshape/Transpose, a bicubic Resize to the patch grid and a Concat with the class row, with
// the Reshape targets read from the shapes of claimed values. Where the image size is static the
// Resize keeps the grid (an identity at scale 1 for every mode), and the whole subgraph is a
// constant the plan adds row by row.
#include <algorithm>
#include <optional>

#include "graph/encoder/float_tensor.h"
#include "graph/encoder/matcher.h"

namespace npuflow::encoder {
namespace {

constexpr int kMaxFoldDepth = 24;

// A Resize that keeps every dim: output dims from its sizes input or inferred shape equal the
// input's, scales (if given) all 1, no region of interest.
bool identity_resize(const Matcher& m, const NodeInfo& node) {
  const Attribute* mode = node.attribute("coordinate_transformation_mode");
  if (mode && mode->text && *mode->text == "tf_crop_and_resize") return false;
  const auto in = m.static_shape(node.input(0));
  if (!in || std::find(in->begin(), in->end(), -1) != in->end()) return false;
  std::optional<std::vector<int64_t>> out;
  if (node.input(3) != kNoValue) out = m.shape_values(node.input(3));
  if (!out) out = m.static_shape(node.outputs[0]);
  if (!out || *out != *in) return false;
  if (node.input(2) != kNoValue && m.float_constant(node.input(2))) {
    const float* scales = m.float_data(node.input(2));
    for (int64_t i = 0; i < m.float_count(node.input(2)); ++i)
      if (scales[i] != 1.0f) return false;
  }
  return true;
}

}  // namespace

std::optional<FloatTensor> Matcher::fold(ValueId v, Used& used, int depth) const {
  if (v == kNoValue || depth > kMaxFoldDepth) return std::nullopt;
  const ValueId c = through_identity(v);
  if (float_constant(c)) {
    FloatTensor t;
    t.shape = g_.value(c).shape;
    t.data.assign(float_data(c), float_data(c) + float_count(c));
    return t;
  }
  const NodeId p = producer(v);
  if (p == kNoNode || !is_standard_domain(g_.node(p)) || g_.value(v).type != ElementType::kFloat32)
    return std::nullopt;
  const NodeInfo& node = g_.node(p);
  const std::string& op = node.op_type;
  std::optional<FloatTensor> result;
  if (op == "Identity" || is_noop_cast(p) || (op == "Resize" && identity_resize(*this, node))) {
    result = fold(node.input(0), used, depth + 1);
  } else if (op == "Concat" || op == "Add" || op == "Mul") {
    result = fold(node.input(0), used, depth + 1);
    for (size_t i = 1; result && i < node.inputs.size(); ++i) {
      auto next = fold(node.input(i), used, depth + 1);
      FloatTensor out;
      if (!next || !(op == "Concat" ? concat(*result, *next, node.int_attribute("axis", 0), out)
                                    : broadcast(*result, *next, op == "Add", out)))
        return std::nullopt;
      result = std::move(out);
    }
  } else if (op == "Reshape" || op == "Transpose" || op == "Squeeze" || op == "Unsqueeze" ||
             op == "Slice" || op == "Gather" || op == "Flatten") {
    auto in = fold(node.input(0), used, depth + 1);
    if (!in) return std::nullopt;
    IndexTensor t = IndexTensor::iota(in->shape);
    if (op == "Flatten") {  // [prod(dims < axis), prod(dims >= axis)]
      int64_t axis = node.int_attribute("axis", 1), outer = 1;
      if (axis < 0) axis += static_cast<int64_t>(in->shape.size());
      for (int64_t i = 0; i < axis; ++i) outer *= in->shape[static_cast<size_t>(i)];
      if (!t.reshape({outer, -1})) return std::nullopt;
    } else if (!replay(t, {p})) {
      return std::nullopt;
    }
    FloatTensor out;
    out.shape = t.shape;
    for (int32_t i : t.data) out.data.push_back(in->data[static_cast<size_t>(i)]);
    result = std::move(out);
  }
  if (result) used.push_back(p);
  return result;
}

}  // namespace npuflow::encoder
