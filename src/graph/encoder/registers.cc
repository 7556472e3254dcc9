#include <map>

#include "core/strings.h"
#include "graph/encoder/matcher.h"

namespace npuflow::encoder {
namespace {

// The token range [begin, begin + count) of the embedding a piece of the Concat holds.
struct TokenRange {
  int64_t begin = 0, count = 0;
};

}  // namespace

bool Matcher::registers(ValueId& embedded, int64_t hidden, VisionEncoderClaim& enc, Used& used,
                        Fail& why) const {
  // The embedding reaches one Concat directly or through selectors (Slice, Gather) of tokens.
  NodeId cat = kNoNode;
  std::map<ValueId, std::vector<NodeId>> selections;  // Concat input -> selectors from `embedded`
  for (NodeId c : non_shape_consumers(embedded)) {
    std::vector<NodeId> chain;
    ValueId piece = embedded;
    NodeId node = c;
    while (is(node, "Slice") || is(node, "Gather")) {
      chain.push_back(node);
      piece = g_.node(node).outputs[0];
      const std::vector<NodeId> next = non_shape_consumers(piece);
      if (next.size() != 1) return true;  // not a register insert: the blocks decide
      node = next[0];
    }
    if (!is(node, "Concat") || (cat != kNoNode && cat != node)) return true;
    cat = node;
    selections[piece] = chain;
  }
  if (cat == kNoNode) return true;

  const NodeInfo& concat = g_.node(cat);
  const ValueInfo& in = g_.value(embedded);
  const int64_t rank = in.has_shape ? static_cast<int64_t>(in.shape.size()) : 3;
  int64_t axis = concat.int_attribute("axis", 0);
  if (axis < 0) axis += rank;
  if (rank != 3 || axis != 1) {
    why = {"registers", str_cat("'", concat.name, "' concatenates rows to the embedding on axis ",
                                axis, " of ", rank, ", not on the token axis")};
    return false;
  }

  // Which tokens each selected piece holds, replayed on an index tensor of the embedding; a
  // symbolic token count is replayed at two sizes, which must agree on the insert position.
  const int64_t known_tokens = in.has_shape ? in.shape[1] : -1;
  const std::vector<int64_t> sizes =
      known_tokens > 0 ? std::vector<int64_t>{known_tokens} : std::vector<int64_t>{61, 97};
  int64_t position = -1;
  Used side_used;
  for (int64_t tokens : sizes) {
    int64_t next = 0, before = -1;
    for (ValueId part : concat.inputs) {
      auto it = selections.find(part);
      if (it == selections.end()) {
        if (before >= 0) {
          why = {"registers", str_cat("'", concat.name, "' inserts more than one block of rows")};
          return false;
        }
        before = next;
        continue;
      }
      IndexTensor t = IndexTensor::iota({1, tokens, hidden});
      ShapeEnv env{{embedded, t.shape}};
      TokenRange range{0, tokens};
      if (!it->second.empty()) {
        const bool replayed = replay(t, it->second, 0, &env) && t.shape.size() == 3 &&
                              t.shape[0] == 1 && t.shape[2] == hidden && !t.data.empty();
        range = {replayed ? t.data[0] / hidden : -1, replayed ? t.shape[1] : 0};
        for (size_t i = 0; replayed && i < t.data.size(); ++i) {
          if (t.data[i] != range.begin * hidden + static_cast<int64_t>(i)) range.begin = -1;
        }
      }
      if (range.begin != next) {
        why = {"registers", str_cat("'", concat.name,
                                    "' does not keep the embedded tokens whole and in order "
                                    "around the rows it inserts")};
        return false;
      }
      next += range.count;
    }
    if (next != tokens || before < 0 || (position >= 0 && before != position)) {
      why = {"registers", str_cat("'", concat.name,
                                  "' is not the embedded tokens with one block of rows "
                                  "inserted at a fixed position")};
      return false;
    }
    position = before;
  }

  // The inserted rows: a constant [.., R, D] (possibly Expanded over the batch, or gathered).
  ValueId rows = kNoValue;
  for (ValueId part : concat.inputs)
    if (!selections.count(part)) rows = part;
  SideRef ref = side(rows, side_used);
  if (ref.constant.empty()) {
    why = {"registers", str_cat("the rows '", g_.value(rows).name, "' that '", concat.name,
                                "' inserts among the embedded tokens are not constant")};
    return false;
  }
  const std::vector<int64_t>& table = g_.value(g_.find_value(ref.constant)).shape;
  const int64_t count = ref.gather_indices.empty()
                            ? (table.size() >= 2 ? table[table.size() - 2] : 1)
                            : element_count(g_.value(g_.find_value(ref.gather_indices)).shape);
  // An Expand may repeat a single row: the Concat's output must show exactly R more tokens,
  // unless no Expand sits in between.
  const ValueInfo& out = g_.value(concat.outputs[0]);
  const bool expanded = is(producer(rows), "Expand");
  const bool counted = out.has_shape && out.shape.size() == 3 && out.shape[1] > 0 &&
                       known_tokens > 0 && out.shape[1] == known_tokens + count;
  if (table.empty() || table.back() != hidden || (expanded && !counted)) {
    why = {"registers", str_cat("the rows '", ref.constant, "' that '", concat.name,
                                "' inserts are not ", count, " rows of ", hidden, " channels")};
    return false;
  }
  for (const auto& [piece, chain] : selections) used.insert(used.end(), chain.begin(), chain.end());
  used.insert(used.end(), side_used.begin(), side_used.end());
  used.push_back(cat);
  enc.registers = ref;
  enc.register_position = position;
  enc.register_count = count;
  embedded = concat.outputs[0];
  return true;
}

}  // namespace npuflow::encoder
