// Windowed encoders (RF-DETR's DINOv2 backbone): the embedded tokens are partitioned into
// windows that the stream carries as sequences of the batch, and a global block merges each
// image's windows back into one sequence around its attention. Both are found by what the graph
// computes: the merge is a Reshape of contiguous sequences (no data moves), and the partition,
// which does move data, stays on the CPU EP in front of the claim.
#include <deque>
#include <set>

#include "graph/encoder/matcher.h"

namespace npuflow::encoder {
namespace {

// Ops that only move, select or repeat elements: a window partition and a register-token Concat
// are made of these.
bool moves_data_only(const std::string& op) {
  static const std::set<std::string> kOps = {"Slice",  "Reshape", "Transpose", "Concat",
                                             "Tile",   "Expand",  "Squeeze",   "Unsqueeze",
                                             "Gather", "Flatten", "Identity",  "Split"};
  return kOps.count(op) > 0;
}

}  // namespace

std::optional<Matcher::Regroup> Matcher::regroup(ValueId v, int64_t tokens, bool merge) const {
  const NodeId reshape = producer_is(v, "Reshape");
  if (reshape == kNoNode || tokens <= 0) return std::nullopt;
  const ValueId in = g_.node(reshape).input(0);
  const auto a = static_shape(in), b = static_shape(v);
  if (!a || !b || a->size() != 3 || b->size() != 3) return std::nullopt;
  const std::vector<int64_t>& sequences = merge ? *a : *b;  // [B, T, D]
  const std::vector<int64_t>& grouped = merge ? *b : *a;    // [B/g, g T, D]
  if (sequences[1] != tokens || sequences[2] <= 0 || grouped[2] != sequences[2] ||
      grouped[1] <= 0 || grouped[1] % tokens != 0) {
    return std::nullopt;
  }
  // Row-major, with D and T as stated, a Reshape (which keeps the element count) can only put
  // sequence b's token t at (b / g, (b % g) T + t): g consecutive sequences joined.
  // g = 1 is a Reshape to the shape it has (a windowed encoder's global block with one window).
  const int64_t group = grouped[1] / tokens;
  if (sequences[0] > 0 && grouped[0] > 0 && sequences[0] != group * grouped[0]) return std::nullopt;
  return Regroup{in, group};
}

std::vector<std::pair<ValueId, int64_t>> Matcher::partitioned_streams(ValueId embedded) const {
  std::vector<std::pair<ValueId, int64_t>> found;
  const auto shape = static_shape(embedded);
  if (!shape || shape->size() != 3 || (*shape)[2] <= 0) return found;
  const int64_t hidden = (*shape)[2];
  // Breadth first, so the nearest stream comes first; a partition is a handful of ops.
  constexpr int kMaxDepth = 12;
  std::deque<std::pair<ValueId, int>> frontier = {{embedded, 0}};
  std::set<ValueId> seen = {embedded};
  while (!frontier.empty()) {
    const auto [v, depth] = frontier.front();
    frontier.pop_front();
    if (v != embedded) {
      const auto s = static_shape(v);
      if (s && s->size() == 3 && (*s)[2] == hidden && (*s)[1] > 0) found.push_back({v, (*s)[1]});
    }
    if (depth == kMaxDepth) continue;
    for (NodeId c : non_shape_consumers(v)) {
      const NodeInfo& node = g_.node(c);
      if (!is_standard_domain(node) || !moves_data_only(node.op_type)) continue;
      for (ValueId out : node.outputs) {
        if (seen.insert(out).second) frontier.push_back({out, depth + 1});
      }
    }
  }
  return found;
}

}  // namespace npuflow::encoder
