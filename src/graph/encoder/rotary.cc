// Rotary position embeddings on q and k, as transformers writes them:
// x * cos + cat(-x[..., dh/2:], x[..., :dh/2]) * sin, after the head split. Found by structure;
// the tables are any float values broadcast over [.., T, head_dim] (the plan applies them as the
// graph computed them), and where the rotation sits in the head-split chain is proven by replay.
#include "ops/rotary.h"

#include <algorithm>
#include <set>

#include "core/strings.h"
#include "graph/encoder/matcher.h"

namespace npuflow::encoder {
namespace {

// The one axis a Concat or Slice works on, normalized against `rank` (-1 if not one axis).
int64_t normalized(int64_t axis, int64_t rank) {
  return axis < 0 ? axis + rank : axis;
}

}  // namespace

ValueId Matcher::before_noop_casts(ValueId v) const {
  for (NodeId p = producer(v); p != kNoNode && is_noop_cast(p); p = producer(v))
    v = g_.node(p).input(0);
  return v;
}

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
        // x may reach the Mul and the Slices through no-op Casts (transformers 5.x writes
        // q.float() twice): all three read one root.
        const ValueId root = before_noop_casts(xx);
        if (hi == kNoNode || lo == kNoNode || before_noop_casts(g_.node(hi).input(0)) != root ||
            before_noop_casts(g_.node(lo).input(0)) != root)
          continue;
        const auto dims = static_shape(root);
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
        // x feeds exactly the rotation (through those Casts); each intermediate feeds only its
        // next step.
        Used casts;
        std::set<NodeId> readers;
        std::vector<ValueId> frontier = {root};
        bool only_casts_between = true;
        while (!frontier.empty() && only_casts_between) {
          const ValueId w = frontier.back();
          frontier.pop_back();
          for (NodeId c : non_shape_consumers(w)) {
            if (is_noop_cast(c)) {
              casts.push_back(c);
              frontier.push_back(g_.node(c).outputs[0]);
            } else {
              readers.insert(c);
            }
          }
          only_casts_between = casts.size() < 8;
        }
        if (!only_casts_between || readers != std::set<NodeId>{m1, hi, lo}) continue;
        bool single = true;
        for (ValueId w : {g_.node(m1).outputs[0], g_.node(m2).outputs[0], g_.node(hi).outputs[0],
                          g_.node(lo).outputs[0], g_.node(neg).outputs[0], rotated})
          single &= non_shape_consumers(w).size() == 1;
        if (!single) continue;
        Chain::Rope rope;
        rope.cos = cos;
        rope.sin = sin;
        rope.root = root;
        rope.output = v;
        x = root;
        used.insert(used.end(), {add, m1, m2, cat, neg, hi, lo});
        used.insert(used.end(), casts.begin(), casts.end());
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
  if (rope.probed) {
    const std::vector<NodeId> layout(
        chain.ops.begin() + static_cast<std::ptrdiff_t>(rope.at),
        chain.ops.begin() + static_cast<std::ptrdiff_t>(rope.at + rope.layout_ops));
    if (!replay(t, before, chain.split_output, &local)) {
      why = {"rotary_layout", "the rotation's input does not replay"};
      return false;
    }
    return probe_rotary(rope, layout, t, heads, d, tokens, n, offset, why);
  }
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
    // Constant tables are laid out again at compile time. Runtime ones only when ORT made them
    // by a Transpose of tables in the canonical layout (the one that undoes table_perm): the
    // plan reads those instead.
    if (ok && (!float_constant(rope.cos) || !float_constant(rope.sin))) {
      ValueId canonical_tables[2] = {kNoValue, kNoValue};
      const ValueId tables[2] = {rope.cos, rope.sin};
      for (int i = 0; i < 2 && ok; ++i) {
        const NodeId tr = producer_is(tables[i], "Transpose");
        auto p = tr == kNoNode ? std::nullopt : perm_of(g_.node(tr));
        ok = p && p->size() == 4;
        for (size_t a = 0; ok && a < 4; ++a)
          ok = (*p)[static_cast<size_t>(rope.table_perm[a])] == static_cast<int64_t>(a);
        if (ok) canonical_tables[i] = g_.node(tr).input(0);
      }
      if (ok) {
        rope.cos = canonical_tables[0];
        rope.sin = canonical_tables[1];
        rope.table_perm.clear();
      } else {
        // Else the plan lays the runtime tables out itself at each run (they are small).
        ok = true;
      }
    }
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
    if (!rope.table_perm.empty() && !float_constant(table)) {
      // A runtime table laid out at each run: its inferred dims, permuted alike.
      auto shape = static_shape(table);
      if (!shape) continue;  // checked against the runtime shape by the plan
      std::vector<int64_t> full(
          rope.table_perm.size() - std::min(rope.table_perm.size(), shape->size()), 1);
      full.insert(full.end(), shape->begin(), shape->end());
      if (full.size() != rope.table_perm.size()) continue;
      dims.emplace();
      for (int64_t axis : rope.table_perm) dims->push_back(full[static_cast<size_t>(axis)]);
    } else if (!rope.table_perm.empty()) {
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

std::optional<std::pair<std::vector<float>, std::vector<float>>> Matcher::canonical_tables(
    const Chain::Rope& rope) const {
  if (rope.probed) return std::pair{rope.cos_values, rope.sin_values};
  const std::vector<int64_t> identity = {0, 1, 2, 3};
  const std::vector<int64_t>& perm = rope.table_perm.empty() ? identity : rope.table_perm;
  auto cos = rotary_table(rope.cos, perm), sin = rotary_table(rope.sin, perm);
  if (!cos || !sin) return std::nullopt;
  return std::pair{std::move(cos->first), std::move(sin->first)};
}

std::optional<IndexTensor> Matcher::laid_out_from(ValueId table, ValueId origin,
                                                  const std::vector<int64_t>& perm,
                                                  int64_t probe) const {
  std::vector<NodeId> chain;  // backward, from the table to the origin
  for (ValueId v = table; v != origin;) {
    const NodeId p = producer(v);
    if (p == kNoNode ||
        !(is(p, "Transpose") || is(p, "Unsqueeze") || is(p, "Squeeze") || is(p, "Reshape") ||
          is(p, "Identity") || is_noop_cast(p)) ||
        chain.size() > 16)
      return std::nullopt;
    chain.push_back(p);
    v = g_.node(p).input(0);
  }
  auto dims = static_shape(origin);
  if (!dims) return std::nullopt;
  for (int64_t& d : *dims)
    if (d < 0) d = probe;
  IndexTensor t = IndexTensor::iota(*dims);
  ShapeEnv env;
  if (!replay(t, std::vector<NodeId>(chain.rbegin(), chain.rend()), 0, &env)) return std::nullopt;
  if (perm.empty()) return t;
  if (t.shape.size() > perm.size()) return std::nullopt;
  t.shape.insert(t.shape.begin(), perm.size() - t.shape.size(), 1);
  if (!t.transpose(perm)) return std::nullopt;
  return t;
}

bool Matcher::same_runtime_table(ValueId q, const std::vector<int64_t>& q_perm, ValueId k,
                                 const std::vector<int64_t>& k_perm) const {
  // The value both are layouts of: the first of q's layout ancestors that k also reaches.
  std::set<ValueId> q_line;
  for (ValueId v = q; v != kNoValue;) {
    q_line.insert(v);
    const NodeId p = producer(v);
    if (p == kNoNode || !(is(p, "Transpose") || is(p, "Unsqueeze") || is(p, "Squeeze") ||
                          is(p, "Reshape") || is(p, "Identity") || is_noop_cast(p)))
      break;
    v = g_.node(p).input(0);
  }
  ValueId origin = k;
  while (origin != kNoValue && !q_line.count(origin)) {
    const NodeId p = producer(origin);
    origin = p == kNoNode ? kNoValue : g_.node(p).input(0);
  }
  if (origin == kNoValue) return false;
  // Two probe sizes for the unknown dims, so that a batch and a token axis cannot be confused.
  for (int64_t probe : {5, 7}) {
    auto a = laid_out_from(q, origin, q_perm, probe), b = laid_out_from(k, origin, k_perm, probe);
    if (!a || !b || a->shape != b->shape || a->data != b->data) return false;
  }
  return true;
}

bool Matcher::same_rotary(const Chain::Rope& q, const Chain::Rope& k, Fail& why) const {
  if (!q.probed && !k.probed && q.cos == k.cos && q.sin == k.sin && q.table_perm == k.table_perm)
    return true;
  // Runtime tables: layouts of the same values that, each laid out by its own perm, put every
  // element in the same place (proven by replaying both layout chains on one index tensor).
  if (!q.probed && !k.probed && !float_constant(q.cos) && !float_constant(k.cos) &&
      same_runtime_table(q.cos, q.table_perm, k.cos, k.table_perm) &&
      same_runtime_table(q.sin, q.table_perm, k.sin, k.table_perm))
    return true;
  // Equal constants once laid out (ORT may store a transposed copy for one of them).
  auto a = canonical_tables(q), b = canonical_tables(k);
  if (a && b && *a == *b) return true;
  why = {"rotary_layout", "Q and K are not rotated by the same tables"};
  return false;
}

}  // namespace npuflow::encoder
