#include <algorithm>
#include <map>

#include "core/strings.h"
#include "graph/encoder/matcher.h"

namespace npuflow::encoder {

bool Matcher::expands_over_batch(NodeId expand) const {
  const NodeInfo& node = g_.node(expand);
  const ValueInfo& data = g_.value(node.input(0));
  // Evaluated with a dynamic batch of 1: a pure batch broadcast then adds no element, while a
  // mutated target that empties the constant (a batch of 0) or repeats its rows does.
  auto target = shape_values(node.input(1));
  if (!float_constant(node.input(0)) || !data.has_shape || !target) return false;
  std::vector<int64_t> out(std::max(data.shape.size(), target->size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    const size_t from_end = out.size() - 1 - i;
    const int64_t a =
        from_end < data.shape.size() ? data.shape[data.shape.size() - 1 - from_end] : 1;
    const int64_t b = from_end < target->size() ? (*target)[target->size() - 1 - from_end] : 1;
    if (a < 0 || b < 0 || (a != b && a != 1 && b != 1)) return false;
    out[i] = a == 1 ? b : a;
  }
  return element_count(out) == element_count(data.shape);
}

bool Matcher::expanded_constant_fits(ValueId v, const char* what, const char* reason,
                                     Fail& why) const {
  // An Expand of a constant whose target is not a batch broadcast empties or repeats it (ONNX
  // Runtime then concatenates rows it never wrote, or adds rows the patches do not have): the
  // claim, which reads the constant for each image, cannot stand in for it.
  const NodeId e = producer(v);
  if (!is(e, "Expand") || !float_constant(g_.node(e).input(0)) || expands_over_batch(e))
    return true;
  why = {reason, str_cat("the ", what, "'s Expand '", g_.node(e).name,
                         "' is not provably a broadcast over the batch")};
  return false;
}

SideRef Matcher::side(ValueId v, Used& used) const {
  SideRef ref;
  ref.present = true;
  if (float_constant(v)) {
    ref.constant = name(v);
    return ref;
  }
  const NodeId p = producer(v);
  if (is(p, "Expand") && expands_over_batch(p) && non_shape_consumers(v).size() == 1) {
    ref.constant = name(g_.node(p).input(0));
    used.push_back(p);
    return ref;
  }
  if (is(p, "Gather") && float_constant(g_.node(p).input(0)) && int_constant(g_.node(p).input(1)) &&
      g_.node(p).int_attribute("axis", 0) == 0 && non_shape_consumers(v).size() == 1) {
    ref.constant = name(g_.node(p).input(0));
    ref.gather_indices = name(g_.node(p).input(1));
    used.push_back(p);
    return ref;
  }
  // Computed from constants (a position embedding interpolated to the grid it already has).
  Used folded;
  if (auto value = fold(v, folded)) {
    ref.values = std::move(value->data);
    ref.values_shape = std::move(value->shape);
    used.insert(used.end(), folded.begin(), folded.end());
    return ref;
  }
  ref.runtime = name(v);
  return ref;
}

bool Matcher::embedding(NodeId conv_id, VisionEncoderClaim& enc, Embedding& out, Fail& why) const {
  Used& used = out.used;
  const NodeInfo& conv = g_.node(conv_id);
  const ValueId w = conv.input(1);
  if (!float_constant(w) || g_.value(w).shape.size() != 4) {
    why = {"patch_embedding", "the Conv weight is not a constant 4-D tensor"};
    return false;
  }
  const std::vector<int64_t>& wshape = g_.value(w).shape;
  const int64_t d = wshape[0];
  if (conv.int_attribute("group", 1) != 1) {
    why = {"patch_embedding", "grouped Conv"};
    return false;
  }
  for (const char* attr : {"pads", "dilations"}) {
    std::vector<int64_t> list = int_list_attribute(conv, attr);
    for (int64_t x : list) {
      if (x != (std::string(attr) == "pads" ? 0 : 1)) {
        why = {"patch_embedding", str_cat("Conv ", attr, " are not the default")};
        return false;
      }
    }
  }
  if (const Attribute* pad = conv.attribute("auto_pad");
      pad && pad->text && *pad->text != "NOTSET" && *pad->text != "VALID") {
    why = {"patch_embedding", "Conv auto_pad " + *pad->text};
    return false;
  }
  std::vector<int64_t> strides = int_list_attribute(conv, "strides");
  if (strides.size() != 2) strides = {wshape[2], wshape[3]};
  enc.patch_weight = name(w);
  if (conv.input(2) != kNoValue) {
    if (!float_constant(conv.input(2))) {
      why = {"patch_embedding", "the Conv bias is not constant"};
      return false;
    }
    enc.patch_bias = name(conv.input(2));
  }
  enc.stride_h = strides[0];
  enc.stride_w = strides[1];
  // The pixels, seen through Identity and no-op Casts (CLIP's and SigLIP's exports cast the
  // input to the weights' type): those nodes join the claim, unless something else reads their
  // output (Depth Anything's neck reads its shape): then the fused node reads that output.
  ValueId pixels = conv.input(0);
  for (NodeId p = producer(pixels);
       p != kNoNode && (is(p, "Identity") || is_noop_cast(p)) &&
       g_.value(pixels).consumers.size() == 1 && !g_.value(pixels).is_graph_output;
       p = producer(pixels)) {
    used.push_back(p);
    pixels = g_.node(p).input(0);
  }
  enc.input = g_.value(pixels).name;
  used.push_back(conv_id);

  // Flatten the patch grid into tokens: Reshape/Flatten/Transpose to [B, P, D].
  ValueId v = conv.outputs[0];
  std::vector<NodeId> flatten;
  for (int guard = 0; guard < 4; ++guard) {
    std::vector<NodeId> data_consumers = non_shape_consumers(v);
    if (data_consumers.size() != 1) break;
    const NodeId c = data_consumers[0];
    const NodeInfo& node = g_.node(c);
    if (!is_standard_domain(node) ||
        (node.op_type != "Reshape" && node.op_type != "Transpose" && node.op_type != "Flatten"))
      break;
    if (node.op_type == "Flatten") {
      why = {"patch_embedding", "Flatten to 2-D is not a token layout"};
      return false;
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
    // The shape as well as the order: [P, 1, D] (a Transpose perm [2, 0, 1]) keeps the order of a
    // batch of 1, but the CPU EP then broadcasts the position embedding to [P, P, D].
    const std::vector<int64_t> token_major{1, t.shape[2] * t.shape[3], d};
    ShapeEnv env;
    bool ok = replay(t, flatten, 0, &env) && t.shape == token_major;
    for (size_t i = 0; ok && i < t.data.size(); ++i) ok = t.data[i] == static_cast<int32_t>(i);
    if (!ok) {
      why = {"patch_embedding", "the patch grid is not flattened token-major into [B, P, D]"};
      return false;
    }
  }
  // Class token(s): Concat on the token axis with the patches last.
  if (non_shape_consumers(v).size() == 1 && is(non_shape_consumers(v)[0], "Concat")) {
    const NodeId c = non_shape_consumers(v)[0];
    const NodeInfo& cat = g_.node(c);
    const int64_t axis = cat.int_attribute("axis", 0);
    if ((axis != 1 && axis != -2) || cat.inputs.size() != 2 || cat.input(1) != v) {
      why = {"class_token", "the patches are not concatenated after one prefix on the token axis"};
      return false;
    }
    if (!expanded_constant_fits(cat.input(0), "class token", "class_token", why)) return false;
    enc.cls = side(cat.input(0), used);
    used.push_back(c);
    v = cat.outputs[0];
  }
  // Position embedding.
  if (non_shape_consumers(v).size() == 1 && is(non_shape_consumers(v)[0], "Add")) {
    const NodeId a = non_shape_consumers(v)[0];
    const NodeInfo& add = g_.node(a);
    const ValueId pos = add.input(0) == v ? add.input(1) : add.input(0);
    if (!expanded_constant_fits(pos, "position embedding", "constant_shape", why)) return false;
    enc.pos = side(pos, used);
    used.push_back(a);
    v = add.outputs[0];
  }
  if (!registers(v, d, enc, used, why)) return false;
  out.value = v;
  const ValueInfo& emb = g_.value(v);
  out.tokens = emb.has_shape && emb.shape.size() == 3 ? emb.shape[1] : -1;
  return true;
}

}  // namespace npuflow::encoder
