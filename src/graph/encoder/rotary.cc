// Rotary position embeddings on q and k, as transformers writes them:
// x * cos + cat(-x[..., dh/2:], x[..., :dh/2]) * sin, after the head split. Found by structure;
// the tables are any float values broadcast over [.., T, head_dim] (the plan applies them as the
// graph computed them), and where the rotation sits in the head-split chain is proven by replay.
#include "ops/rotary.h"

#include <algorithm>

#include "core/strings.h"
#include "graph/encoder/matcher.h"

namespace npuflow::encoder {
namespace {

// The one axis a Concat or Slice works on, normalized against `rank` (-1 if not one axis).
int64_t normalized(int64_t axis, int64_t rank) {
  return axis < 0 ? axis + rank : axis;
}

}  // namespace

std::optional<Chain::Rope> Matcher::rotary(ValueId v, ValueId& x, Used& used) const {
  const NodeId add = producer_is(v, "Add");
  if (add == kNoNode) return std::nullopt;
  const NodeInfo& a = g_.node(add);
  for (int first = 0; first < 2; ++first) {
    const NodeId m1 = producer_is(a.input(static_cast<size_t>(first)), "Mul");
    const NodeId m2 = producer_is(a.input(static_cast<size_t>(1 - first)), "Mul");
    if (m1 == kNoNode || m2 == kNoNode) continue;
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 2; ++j) {
        const ValueId xx = g_.node(m1).input(static_cast<size_t>(i));
        const ValueId cos = g_.node(m1).input(static_cast<size_t>(1 - i));
        const ValueId rotated = g_.node(m2).input(static_cast<size_t>(j));
        const ValueId sin = g_.node(m2).input(static_cast<size_t>(1 - j));
        const NodeId cat = producer_is(rotated, "Concat");
        if (cat == kNoNode || g_.node(cat).inputs.size() != 2) continue;
        const NodeId neg = producer_is(g_.node(cat).input(0), "Neg");
        if (neg == kNoNode) continue;
        const NodeId hi = producer_is(g_.node(neg).input(0), "Slice");
        const NodeId lo = producer_is(g_.node(cat).input(1), "Slice");
        if (hi == kNoNode || lo == kNoNode || g_.node(hi).input(0) != xx ||
            g_.node(lo).input(0) != xx)
          continue;
        const auto dims = static_shape(xx);
        if (!dims || dims->size() < 2) continue;
        const auto rank = static_cast<int64_t>(dims->size());
        if (normalized(g_.node(cat).int_attribute("axis", 0), rank) != rank - 1) continue;
        // Each Slice works on the last axis only, with step 1.
        bool last_axis = true;
        for (NodeId s : {hi, lo}) {
          const NodeInfo& slice = g_.node(s);
          auto axes = slice.input(3) != kNoValue ? int_constant(slice.input(3))
                                                 : std::optional<std::vector<int64_t>>{};
          auto steps = slice.input(4) != kNoValue ? int_constant(slice.input(4))
                                                  : std::optional<std::vector<int64_t>>{{1}};
          last_axis &= axes && axes->size() == 1 && normalized((*axes)[0], rank) == rank - 1 &&
                       steps && steps->size() == 1 && (*steps)[0] == 1;
        }
        if (!last_axis) continue;
        // The tables are float tensors (constants or runtime values), not q or k themselves.
        const ValueInfo& ci = g_.value(cos);
        const ValueInfo& si = g_.value(sin);
        if (ci.type != ElementType::kFloat32 || si.type != ElementType::kFloat32 || cos == xx ||
            sin == xx || cos == sin)
          continue;
        // x feeds exactly the rotation; each intermediate feeds only its next step.
        const std::vector<NodeId> readers = non_shape_consumers(xx);
        if (readers.size() != 3) continue;
        bool single = true;
        for (ValueId w : {g_.node(m1).outputs[0], g_.node(m2).outputs[0], g_.node(hi).outputs[0],
                          g_.node(lo).outputs[0], g_.node(neg).outputs[0], rotated})
          single &= non_shape_consumers(w).size() == 1;
        if (!single) continue;
        Chain::Rope rope;
        rope.cos = cos;
        rope.sin = sin;
        x = xx;
        used.insert(used.end(), {add, m1, m2, cat, neg, hi, lo});
        rope.first_half = lo;
        rope.second_half = hi;
        return rope;
      }
    }
  }
  return std::nullopt;
}

bool Matcher::rotary_fits(Chain& chain, int64_t heads, int64_t d, int64_t tokens, int64_t n,
                          int64_t offset, const ShapeEnv& env, Fail& why) const {
  Chain::Rope& rope = *chain.rope;
  const int64_t dh = d / heads;
  // The rotation must see the part's [1, H, T, dh] heads, the head dim last: as they are, or
  // transposed (ORT's transpose optimizer moves head-split Transposes past elementwise ops).
  IndexTensor t;
  t.shape = {1, tokens, n};
  t.data.resize(static_cast<size_t>(tokens * n));
  for (size_t i = 0; i < t.data.size(); ++i) t.data[i] = static_cast<int32_t>(i);
  ShapeEnv local = env;
  const std::vector<NodeId> before(chain.ops.begin(),
                                   chain.ops.begin() + static_cast<std::ptrdiff_t>(rope.at));
  auto canonical = [&](const IndexTensor& x) {
    if (x.shape != std::vector<int64_t>{1, heads, tokens, dh}) return false;
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t tt = 0; tt < tokens; ++tt)
        for (int64_t c = 0; c < dh; ++c)
          if (x.data[static_cast<size_t>((h * tokens + tt) * dh + c)] !=
              static_cast<int32_t>(tt * n + offset + h * dh + c))
            return false;
    return true;
  };
  bool ok = replay(t, before, chain.split_output, &local) && t.shape.size() == 4 && dh % 2 == 0;
  rope.table_perm.clear();
  if (ok && !canonical(t)) {
    ok = false;
    std::vector<int64_t> perm = {0, 1, 2};
    do {
      IndexTensor moved = t;
      const std::vector<int64_t> p4 = {perm[0], perm[1], perm[2], 3};
      if (moved.transpose(p4) && canonical(moved)) {
        ok = true;
        rope.table_perm = p4;
      }
    } while (!ok && std::next_permutation(perm.begin(), perm.end()));
    // Such tables are laid out again at compile time: constants only.
    if (ok && (!float_constant(rope.cos) || !float_constant(rope.sin))) ok = false;
  }
  if (!ok) {
    why = {"rotary_layout",
           str_cat("the rotary embedding does not act on [B, ", heads, ", T, ", dh, "] heads")};
    return false;
  }
  // The halves: [0, dh/2) and [dh/2, dh) of the head dim (an end past dh is clamped to it).
  const std::vector<int64_t> q_shape = {1, heads, tokens, dh};
  auto bounds = [&](NodeId s) -> std::pair<int64_t, int64_t> {
    const NodeInfo& slice = g_.node(s);
    local[slice.input(0)] = q_shape;
    auto b = shape_values(slice.input(1), &local), e = shape_values(slice.input(2), &local);
    if (!b || !e || b->size() != 1 || e->size() != 1) return {-1, -1};
    int64_t lo = (*b)[0] < 0 ? (*b)[0] + dh : (*b)[0], hi = (*e)[0] < 0 ? (*e)[0] + dh : (*e)[0];
    return {std::clamp<int64_t>(lo, 0, dh), std::clamp<int64_t>(hi, 0, dh)};
  };
  const auto first = bounds(rope.first_half), second = bounds(rope.second_half);
  if (first != std::pair<int64_t, int64_t>{0, dh / 2} ||
      second != std::pair<int64_t, int64_t>{dh / 2, dh}) {
    why = {"rotary_halves", str_cat("the rotary embedding's halves are [", first.first, ",",
                                    first.second, ") and [", second.first, ",", second.second,
                                    "), not [0,", dh / 2, ") and [", dh / 2, ",", dh, ")")};
    return false;
  }
  // The tables broadcast over [B|1, 1, T, dh]: no per-head tables, no other width.
  for (ValueId table : {rope.cos, rope.sin}) {
    std::optional<std::vector<int64_t>> dims;
    if (!rope.table_perm.empty()) {
      auto laid_out = rotary_table(table, rope.table_perm);
      if (laid_out) dims = laid_out->second;
    } else {
      dims = static_shape(table);
      if (!dims) continue;  // checked against the runtime shape by the plan
    }
    const auto r = dims ? static_cast<int64_t>(dims->size()) : 0;
    bool fits =
        r >= 2 && r <= 4 &&
        ((*dims)[static_cast<size_t>(r - 1)] == dh || (*dims)[static_cast<size_t>(r - 1)] < 0);
    if (fits && r == 4) fits = (*dims)[1] == 1;
    if (!fits) {
      why = {"rotary_table",
             str_cat("the rotary table '", name(table), "' has shape ",
                     dims ? shape_string(*dims) : std::string("?"), ", not [.., T, ", dh, "]")};
      return false;
    }
  }
  return true;
}

std::optional<std::pair<std::vector<float>, std::vector<int64_t>>> Matcher::rotary_table(
    ValueId table, const std::vector<int64_t>& perm) const {
  if (!float_constant(table)) return std::nullopt;
  const ValueInfo& info = g_.value(through_identity(table));
  if (!info.has_shape || info.shape.size() > perm.size()) return std::nullopt;
  PermutedTable laid_out = permute_table(float_data(table), info.shape, perm);
  if (laid_out.shape.empty()) return std::nullopt;
  return std::pair{std::move(laid_out.data), std::move(laid_out.shape)};
}

bool Matcher::same_rotary(const Chain::Rope& q, const Chain::Rope& k, Fail& why) const {
  bool same = true;
  for (int i = 0; i < 2 && same; ++i) {
    const ValueId a = i == 0 ? q.cos : q.sin, b = i == 0 ? k.cos : k.sin;
    if (a == b && q.table_perm == k.table_perm) continue;
    // Equal constants once laid out (ORT stores a transposed copy for one of them).
    const std::vector<int64_t> identity = {0, 1, 2, 3};
    auto ta = rotary_table(a, q.table_perm.empty() ? identity : q.table_perm);
    auto tb = rotary_table(b, k.table_perm.empty() ? identity : k.table_perm);
    same = ta && tb && *ta == *tb;
  }
  if (!same) why = {"rotary_layout", "Q and K are not rotated by the same tables"};
  return same;
}

}  // namespace npuflow::encoder
