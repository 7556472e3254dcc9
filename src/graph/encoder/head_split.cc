// The head split as a chain: from a Q, K or V operand back to its projection through layout ops
// (Reshape, Transpose, Squeeze/Unsqueeze, a selector of a fused projection, no-op Casts), scalar
// scales and, on q and k, one rotary embedding; and the head count a split Reshape names.
#include <algorithm>

#include "graph/encoder/matcher.h"

namespace npuflow::encoder {

std::optional<Chain> Matcher::layout_chain(ValueId v, float& scale, Used& used, bool allow_scale,
                                           bool allow_select, bool allow_rope) const {
  Chain chain;
  Used local;
  ValueId rotated = kNoValue;  // the rotation's input: read by its three nodes
  for (int guard = 0; guard < 16; ++guard) {
    Used lin_used;
    if (auto lin = linear(v, lin_used, true)) {
      chain.linear = *lin;
      if (lin->reshaped_output != kNoNode) chain.ops.push_back(lin->reshaped_output);
      // Recorded backward: the rotation comes after the ops found after it.
      if (chain.rope) chain.rope->at = chain.ops.size() - chain.rope->at;
      std::reverse(chain.ops.begin(), chain.ops.end());
      local.insert(local.end(), lin_used.begin(), lin_used.end());
      used.insert(used.end(), local.begin(), local.end());
      return chain;
    }
    const NodeId p = producer(v);
    if (p == kNoNode || !is_standard_domain(g_.node(p))) return std::nullopt;
    const NodeInfo& node = g_.node(p);
    // The fused value has one reader per part: attention() checks they are q's, k's and v's.
    // A grid attention's q is read by its relative-position bias too (checked there).
    if (v != chain.fused && v != rotated) {
      std::vector<NodeId> readers = non_shape_consumers(v);
      if (grid_mode_)
        readers.erase(std::remove_if(readers.begin(), readers.end(),
                                     [&](NodeId r) { return rel_pos_tap(r); }),
                      readers.end());
      if (readers.size() > 1 || (!grid_mode_ && readers.size() != 1)) return std::nullopt;
    }
    if (allow_rope && !chain.rope && node.op_type == "Add") {
      ValueId x = kNoValue;
      auto rope = rotary(v, x, local);
      if (!rope) rope = region_rotary(v, chain.ops, x, local);
      if (!rope) return std::nullopt;
      rope->at = chain.ops.size();
      chain.rope = rope;
      v = rotated = x;
      continue;
    }
    if (node.op_type == "Reshape" || node.op_type == "Transpose" || node.op_type == "Squeeze" ||
        node.op_type == "Unsqueeze") {
      chain.ops.push_back(p);
      local.push_back(p);
      v = node.input(0);
    } else if (allow_select && chain.selector == kNoNode &&
               (node.op_type == "Split" || node.op_type == "Slice" || node.op_type == "Gather")) {
      chain.selector = p;
      chain.split_output = static_cast<int>(std::find(node.outputs.begin(), node.outputs.end(), v) -
                                            node.outputs.begin());
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
    } else if (node.op_type == "Identity" || is_noop_cast(p)) {
      // Moves nothing, but is replayed: a shape chain may read the value it writes (SDPA
      // decompositions reshape by Shape(q.float())).
      chain.ops.push_back(p);
      local.push_back(p);
      v = node.input(0);
    } else {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

std::optional<int64_t> Matcher::heads_of(const std::vector<NodeId>& ops) const {
  for (NodeId n : ops) {
    const NodeInfo& node = g_.node(n);
    if (node.op_type != "Reshape") continue;
    auto target = reshape_target(node);
    if (target && target->size() == 4 && (*target)[2] > 0) return (*target)[2];
    if (target && target->size() == 4 && (*target)[3] > 0) return -(*target)[3];  // -dh
    // A fused projection viewed as [B, T, 3, H, dh] (timm).
    if (target && target->size() == 5 && (*target)[2] == 3 && (*target)[3] > 0) return (*target)[3];
    if (target && target->size() == 5 && (*target)[2] == 3 && (*target)[4] > 0)
      return -(*target)[4];
  }
  return std::nullopt;
}

}  // namespace npuflow::encoder
