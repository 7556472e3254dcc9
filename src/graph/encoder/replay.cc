// Replaying a chain of layout ops on an index tensor (see index_tensor.h): what proves a head
// split, a head merge or a patch flatten moves data as it must.
#include <algorithm>

#include "graph/encoder/canonical.h"

namespace npuflow::encoder {

bool CanonicalGraph::replay(IndexTensor& t, const std::vector<NodeId>& ops, int split_output,
                            ShapeEnv* env) const {
  for (NodeId n : ops) {
    const NodeInfo& node = g_.node(n);
    const auto rank = static_cast<int64_t>(t.shape.size());
    if (env) (*env)[node.input(0)] = t.shape;
    if (node.op_type == "Reshape") {
      auto target = reshape_target(node, env);
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
      // Bounds may be computed from shapes (a TorchScript `x[:, 1:]` ends at Shape(x)[1]).
      auto starts = shape_values(node.input(1), env);
      auto ends = shape_values(node.input(2), env);
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
    } else if (node.op_type == "Pad") {
      // Constant zero padding only: what fills a padded entry is no element of the input.
      const Attribute* mode = node.attribute("mode");
      if ((mode && mode->text && *mode->text != "constant") ||
          (node.input(2) != kNoValue && !zero_float_constant(node.input(2))))
        return false;
      auto pads = shape_values(node.input(1), env);
      if (!pads || pads->size() % 2 != 0) return false;
      const size_t listed = pads->size() / 2;
      std::vector<int64_t> axes;
      if (node.input(3) != kNoValue) {
        auto c = int_constant(node.input(3));
        if (!c || c->size() != listed) return false;
        axes = *c;
      } else {
        if (listed != static_cast<size_t>(rank)) return false;
        for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
      }
      std::vector<int64_t> before(static_cast<size_t>(rank), 0), after(before);
      for (size_t i = 0; i < listed; ++i) {
        const int64_t axis = axes[i] < 0 ? axes[i] + rank : axes[i];
        if (axis < 0 || axis >= rank) return false;
        before[static_cast<size_t>(axis)] = (*pads)[i];
        after[static_cast<size_t>(axis)] = (*pads)[i + listed];
      }
      if (!t.pad(before, after)) return false;
    } else if (node.op_type == "Identity" || is_noop_cast(n)) {
      // Moves nothing.
    } else if (node.op_type == "Squeeze" || node.op_type == "Unsqueeze") {
      // Axes from the input (opset 13+) or the attribute; Squeeze without axes drops every 1.
      std::vector<int64_t> axes;
      if (node.input(1) != kNoValue) {
        auto c = int_constant(node.input(1));
        if (!c) return false;
        axes = *c;
      } else {
        axes = int_list_attribute(node, "axes");
      }
      std::vector<int64_t> target = t.shape;
      if (node.op_type == "Squeeze") {
        std::vector<bool> drop(target.size(), axes.empty());
        for (int64_t a : axes) {
          const int64_t axis = a < 0 ? a + rank : a;
          if (axis < 0 || axis >= rank || target[static_cast<size_t>(axis)] != 1) return false;
          drop[static_cast<size_t>(axis)] = true;
        }
        std::vector<int64_t> kept;
        for (size_t i = 0; i < target.size(); ++i)
          if (!(drop[i] && target[i] == 1)) kept.push_back(target[i]);
        target = kept;
      } else {
        const auto out_rank = rank + static_cast<int64_t>(axes.size());
        std::vector<bool> inserted(static_cast<size_t>(out_rank), false);
        for (int64_t a : axes) {
          const int64_t axis = a < 0 ? a + out_rank : a;
          if (axis < 0 || axis >= out_rank || inserted[static_cast<size_t>(axis)]) return false;
          inserted[static_cast<size_t>(axis)] = true;
        }
        std::vector<int64_t> grown;
        size_t next = 0;
        for (size_t i = 0; i < inserted.size(); ++i)
          grown.push_back(inserted[i] ? 1 : target[next++]);
        target = grown;
      }
      if (!t.reshape(target)) return false;
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
    if (env) {
      const size_t out = node.op_type == "Split" ? static_cast<size_t>(split_output) : 0;
      if (out < node.outputs.size()) (*env)[node.outputs[out]] = t.shape;
    }
  }
  return true;
}

}  // namespace npuflow::encoder
