#include <algorithm>
#include <map>

#include "core/strings.h"
#include "graph/encoder/matcher.h"

namespace npuflow::encoder {

NodeId Matcher::close_over(std::set<NodeId>& claimed) const {
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

std::optional<std::set<NodeId>> Matcher::close_claim(const Embedding& emb, const Stack& s,
                                                     bool from_pixels, VisionEncoderClaim& enc,
                                                     Fail& why) const {
  const std::vector<ValueId>& stream = s.stream;
  const Used& used = emb.used;
  const Used& pre_used = s.pre_used;
  std::set<NodeId> claimed(used.begin(), used.end());
  claimed.insert(pre_used.begin(), pre_used.end());
  claimed.insert(s.blocks_used.begin(), s.blocks_used.end());
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
    enc.registers = {};
    enc.register_position = enc.register_count = 0;
    enc.patch_weight.clear();
    enc.patch_bias.clear();
    enc.note =
        "the embedding runs on the CPU EP: its position embedding depends on the "
        "claimed tokens through a non-shape node";
  }
  if (const NodeId between = close_over(claimed); between != kNoNode) {
    why = {"interleaved_node", str_cat("'", g_.node(between).name, "' (", g_.node(between).op_type,
                                       ") sits between claimed nodes and cannot run inside")};
    return std::nullopt;
  }
  // Shape arithmetic that something outside reads too stays outside: every value a claimed node
  // gives to an unclaimed one becomes an output of the fused node, and the plan computes no shape
  // values. (Its inputs then are read outside in turn: repeat.)
  for (bool changed = true; changed;) {
    changed = false;
    for (auto it = claimed.begin(); it != claimed.end();) {
      bool read_outside = false;
      if (is_shape_node(*it)) {
        for (ValueId out : g_.node(*it).outputs) {
          const ValueInfo& info = g_.value(out);
          read_outside |= info.is_graph_output;
          for (NodeId c : info.consumers) read_outside |= !claimed.count(c);
        }
      }
      if (read_outside) {
        it = claimed.erase(it);
        changed = true;
      } else {
        ++it;
      }
    }
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
      if (auto it = s.norm1_outputs.find(out); it != s.norm1_outputs.end()) {
        enc.exit_norms.push_back(it->second.second);
        exits[out] = {it->second.first, static_cast<int>(enc.exit_norms.size() - 1)};
        continue;
      }
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
  return claimed;
}

}  // namespace npuflow::encoder
