// SAM's decomposed relative-position bias as the exporters write it: the head-split query viewed
// as [windows x heads, rows, cols, head_dim], contracted by two Einsums with the tables of the
// attended rows and columns, the two terms unsqueezed against each other, added and reshaped onto
// the scores [windows, heads, T, T]. Proven by meaning: the equations' letters, the broadcast
// axes, and an index replay of the query's layout.
#include <algorithm>
#include <set>

#include "core/strings.h"
#include "graph/encoder/grid_tiling.h"
#include "graph/encoder/index_tensor.h"
#include "graph/encoder/matcher.h"

namespace npuflow::encoder {
namespace {

// One term of the bias: an Einsum contracting q [b, y, x, c] with a table [y|x, k, c] into
// [b, y, x, k], in any letters and either operand order. axis 1: the table is indexed by the
// query's row y (the rows term); axis 2: by its column x.
struct RelTerm {
  int axis = 0;
  ValueId q = kNoValue, table = kNoValue;
};

std::optional<RelTerm> rel_term(const NodeInfo& einsum) {
  const Attribute* equation = einsum.attribute("equation");
  if (!equation || !equation->text || einsum.inputs.size() != 2) return std::nullopt;
  std::string eq;
  for (char ch : *equation->text)
    if (ch != ' ') eq.push_back(ch);
  const size_t arrow = eq.find("->"), comma = eq.find(',');
  if (arrow == std::string::npos || comma == std::string::npos || comma > arrow)
    return std::nullopt;
  const std::string operands[2] = {eq.substr(0, comma), eq.substr(comma + 1, arrow - comma - 1)};
  const std::string out = eq.substr(arrow + 2);
  for (int qi = 0; qi < 2; ++qi) {
    const std::string& q = operands[qi];
    const std::string& t = operands[1 - qi];
    if (q.size() != 4 || t.size() != 3 || out.size() != 4) continue;
    if (std::set<char>(q.begin(), q.end()).size() != 4) continue;
    const char k = t[1];
    if (q.find(k) != std::string::npos || t[2] != q[3] || out != q.substr(0, 3) + k) continue;
    const int axis = t[0] == q[1] ? 1 : t[0] == q[2] ? 2 : 0;
    if (axis == 0) continue;
    return RelTerm{axis, einsum.input(static_cast<size_t>(qi)),
                   einsum.input(static_cast<size_t>(1 - qi))};
  }
  return std::nullopt;
}

}  // namespace

bool Matcher::rel_pos_tap(NodeId n) const {
  if (is(n, "Einsum")) return true;
  if (!is(n, "Reshape")) return false;
  const std::vector<NodeId> readers = non_shape_consumers(g_.node(n).outputs[0]);
  return !readers.empty() &&
         std::all_of(readers.begin(), readers.end(), [&](NodeId r) { return is(r, "Einsum"); });
}

bool Matcher::grid_rel_pos(ValueId bias, const Attention& att, const GridTiling& tiling,
                           GridRef& grid, Used& used, Fail& why) const {
  const auto fail = [&](std::string detail) {
    why = {"rel_pos_bias", std::move(detail)};
    return false;
  };
  const int64_t tokens = tiling.rows * tiling.cols, heads = att.heads, head_dim = att.d / heads;
  Used local;
  const NodeId reshape = producer_is(bias, "Reshape");
  const auto scores = static_shape(bias);
  if (reshape == kNoNode || !scores ||
      (*scores != std::vector<int64_t>{tiling.windows(), heads, tokens, tokens} &&
       *scores != std::vector<int64_t>{tiling.windows() * heads, tokens, tokens}))
    return fail(str_cat("the scores' bias '", name(bias), "' is not a [", tiling.windows(), ", ",
                        heads, ", ", tokens, ", ", tokens, "] view of a relative-position sum"));
  local.push_back(reshape);
  const NodeId add = producer_is(g_.node(reshape).input(0), "Add");
  if (add == kNoNode) return fail("the relative-position bias is not a sum of two terms");
  local.push_back(add);
  // Each term: Unsqueeze(Einsum) with the rows term broadcast over key columns (axis 4 of the
  // [b, y, x, k_rows, k_cols] sum) and the columns term over key rows (axis 3).
  std::optional<RelTerm> terms[3];
  for (ValueId in : g_.node(add).inputs) {
    const NodeId unsqueeze = producer_is(in, "Unsqueeze");
    if (unsqueeze == kNoNode || non_shape_consumers(in).size() != 1) break;
    const NodeInfo& u = g_.node(unsqueeze);
    const auto axes = u.input(1) != kNoValue ? int_constant(u.input(1))
                                             : std::optional(int_list_attribute(u, "axes"));
    const NodeId einsum = producer_is(u.input(0), "Einsum");
    if (!axes || axes->size() != 1 || einsum == kNoNode) break;
    const int64_t axis = (*axes)[0] < 0 ? (*axes)[0] + 5 : (*axes)[0];
    auto term = rel_term(g_.node(einsum));
    if (!term || axis != 5 - term->axis || terms[term->axis]) break;
    terms[term->axis] = term;
    local.push_back(unsqueeze);
    local.push_back(einsum);
  }
  if (!terms[1] || !terms[2] || terms[1]->q != terms[2]->q)
    return fail(
        "the bias is not Einsum(q, rows table) + Einsum(q, columns table) broadcast against "
        "each other over one query");
  // The query: the attention's q projection laid out as [windows x heads, rows, cols, head_dim].
  float scale = 1.0f;
  auto chain = layout_chain(terms[1]->q, scale, local, true, true, false);
  if (!chain || chain->linear.ref.weight != att.q.weight)
    return fail("the relative-position query is not the attention's q projection");
  const int64_t n = att.fused ? 3 * att.d : att.d;
  IndexTensor x = IndexTensor::iota({tiling.windows(), tokens, n});
  if (!replay(x, chain->ops, chain->split_output) ||
      x.shape !=
          std::vector<int64_t>{tiling.windows() * heads, tiling.rows, tiling.cols, head_dim} ||
      x.data != head_split_indices(tiling.windows(), tokens, att.d, heads, n, 0, false))
    return fail(
        "the relative-position query does not lay out q as [windows x heads, rows, "
        "cols, head_dim]");
  // The tables, folded from constants; a scale on the query is taken into them.
  std::optional<FloatTensor> tables[3];
  for (int axis : {1, 2}) {
    tables[axis] = fold(terms[axis]->table, local);
    const int64_t side = axis == 1 ? tiling.rows : tiling.cols;
    if (!tables[axis] || tables[axis]->shape != std::vector<int64_t>{side, side, head_dim})
      return fail(str_cat("the relative-position ", axis == 1 ? "rows" : "columns",
                          " table is not a constant [", side, ", ", side, ", ", head_dim, "]"));
    for (float& value : tables[axis]->data) value *= scale;
  }
  grid.rel_h = std::move(tables[1]->data);
  grid.rel_h_shape = tables[1]->shape;
  grid.rel_w = std::move(tables[2]->data);
  grid.rel_w_shape = tables[2]->shape;
  used.insert(used.end(), local.begin(), local.end());
  return true;
}

}  // namespace npuflow::encoder
