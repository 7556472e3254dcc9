#include "core/strings.h"
#include "graph/encoder/matcher.h"

namespace npuflow::encoder {

bool Matcher::broadcasts(ValueId stream, ValueId branch) const {
  // The kernel adds the branch to the stream row by row: the two must have one shape. Dims
  // inference left unknown (-1) count as equal; a rank or a known dim that differs does not
  // (a branch whose layout moved the batch axis comes back [H, T, D] against [1, T, D]).
  const auto a = static_shape(stream), b = static_shape(branch);
  if (!a || !b || a->empty() || b->empty()) return false;  // no rank inferred: unknown
  if (a->size() != b->size()) return true;
  for (size_t i = 0; i < a->size(); ++i)
    if ((*a)[i] >= 0 && (*b)[i] >= 0 && (*a)[i] != (*b)[i]) return true;
  return false;
}

void Matcher::take_attention(const Attention& att, EncoderLayerRef& layer) {
  layer.q = att.q;
  layer.k = att.k;
  layer.v = att.v;
  layer.fused_qkv = att.fused;
  layer.attention_scale = att.scale;
  layer.softmax_nan_to_zero = att.nan_to_zero;
}

std::optional<ValueId> Matcher::block(ValueId h, int64_t tokens, EncoderLayerRef& layer, Used& used,
                                      Fail& why) const {
  if (grid_mode_) return grid_block(h, layer, used, why);
  for (NodeId add1 : g_.value(h).consumers) {
    if (!is(add1, "Add")) continue;
    const NodeInfo& a1 = g_.node(add1);
    const ValueId branch = a1.input(0) == h ? a1.input(1) : a1.input(0);
    if (branch == h) continue;
    if (broadcasts(h, branch)) {
      why = {"block_shape", str_cat("the residual add '", g_.node(add1).name,
                                    "' broadcasts its branch against the stream")};
      continue;
    }
    Used local;
    EncoderLayerRef L;
    // The output projection (its width fixes D for the LayerScale check), seen through a
    // Reshape that splits a global block's merged sequences back into the stream's.
    Used o_used;
    std::string ls1;
    int64_t group = 1;
    const auto projection = [&](ValueId x, Used& u) -> std::optional<Linear> {
      group = 1;
      if (auto direct = linear(x, u)) {
        // ORT folds the split into the Reshape after its Gemm (and the head merge into the one
        // before it): the projection reads the merged sequences [B/g, g T, ..] and writes the
        // stream's rows in the same order. The attention's replay proves that layout over g T.
        const auto in = static_shape(direct->x);
        const auto out = static_shape(x);
        if (tokens > 0 && in && out && in->size() >= 3 && out->size() == 3 && (*out)[1] == tokens &&
            (*in)[1] > tokens && (*in)[1] % tokens == 0) {
          group = (*in)[1] / tokens;
          if ((*out)[0] > 0 && (*in)[0] > 0 && (*out)[0] != group * (*in)[0]) return std::nullopt;
        }
        return direct;
      }
      auto split = regroup(x, tokens, /*merge=*/false);
      if (!split || non_shape_consumers(split->input).size() != 1) return std::nullopt;
      auto merged = linear(split->input, u);
      if (!merged) return std::nullopt;
      u.push_back(producer(x));
      group = split->group;
      return merged;
    };
    auto o = projection(branch, o_used);
    if (!o) {
      if (NodeId mul = producer_is(branch, "Mul"); mul != kNoNode) {
        for (int side = 0; side < 2 && !o; ++side) {
          const ValueId c = g_.node(mul).input(static_cast<size_t>(side));
          const ValueId x = g_.node(mul).input(static_cast<size_t>(1 - side));
          if (!float_constant(c) || float_count(c) <= 1) continue;
          o_used.clear();
          o = projection(x, o_used);
          if (o && float_count(c) == o->n && non_shape_consumers(x).size() == 1) {
            ls1 = name(c);
            o_used.push_back(mul);
          } else {
            o.reset();
          }
        }
      }
    }
    if (!o) continue;
    local = o_used;
    L.layer_scale1 = ls1;
    L.o = o->ref;
    Fail att_why;
    auto att = attention(*o, tokens * group, local, att_why);
    if (!att) {
      if (!att_why.reason.empty()) why = att_why;
      continue;
    }
    if (group > 1 && (att->bias != kNoValue || att->rope_cos != kNoValue)) {
      why = {"block_shape", str_cat("the attention over ", group,
                                    " merged sequences adds a bias or a rotary embedding")};
      continue;
    }
    L.attention_group = group;
    take_attention(*att, L);
    if (att->bias != kNoValue) L.attention_bias = name(att->bias);
    heads_ = att->heads;
    heads_source_ = att->heads_source;
    L.rope_cos = att->rope_cos == kNoValue ? SideRef{} : side(att->rope_cos, local);
    L.rope_sin = att->rope_sin == kNoValue ? SideRef{} : side(att->rope_sin, local);
    L.rope_perm = att->rope_perm;
    if (!att->rope_cos_values.empty()) {  // probed tables: [T, head_dim] data
      const int64_t head_dim = att->d / att->heads;
      const std::vector<int64_t> shape = {
          static_cast<int64_t>(att->rope_cos_values.size()) / head_dim, head_dim};
      L.rope_cos = SideRef{true, "", "", "", att->rope_cos_values, shape};
      L.rope_sin = SideRef{true, "", "", "", att->rope_sin_values, shape};
    }
    const int64_t d = att->d;
    // The norms around this attention: post-LN (BERT) or pre-LN whose attention reads the
    // stream itself (ModernBERT's first layer) when the attention reads h; else pre-LN.
    enum class Form { kPost, kPre, kPreWithoutAttentionNorm };
    const std::vector<Form> forms =
        att->x == h && group == 1 ? std::vector<Form>{Form::kPost, Form::kPreWithoutAttentionNorm}
                                  : std::vector<Form>{Form::kPre};
    for (Form form : forms) {
      EncoderLayerRef F = L;
      Used f_used = local;
      ValueId mid = kNoValue;
      if (form == Form::kPost) {
        // Post-LN: LN(h + attn) is the next value.
        std::vector<Used> lu;
        auto lns = forward_layernorms(a1.outputs[0], {}, lu);
        if (lns.size() != 1) {
          why = {"block_shape", "a post-LN block without exactly one LayerNorm after its add"};
          continue;
        }
        F.pre_norm = false;
        F.norm1 = lns[0].second.ref;
        f_used.insert(f_used.end(), lu[0].begin(), lu[0].end());
        mid = lns[0].first;
      } else if (form == Form::kPre) {
        Used ln_used;
        // A global block merges its sequences before its LayerNorm or after it (one per token).
        ValueId normed = att->x;
        const auto merge = [&](ValueId& v) {
          auto m = regroup(v, tokens, /*merge=*/true);
          if (!m || m->group != group) return false;
          ln_used.push_back(producer(v));
          v = m->input;
          return true;
        };
        bool merged = merge(normed);
        auto ln = layernorm(normed, ln_used);
        if (ln && !merged) merged = merge(ln->x);
        if (!ln || ln->x != h || (group > 1 && !merged)) {
          why = {"block_shape", "the attention input is neither the stream nor a LayerNorm of it"};
          continue;
        }
        F.pre_norm = true;
        F.norm1 = ln->ref;
        last_norm1_ = {normed, ln->ref};
        f_used.insert(f_used.end(), ln_used.begin(), ln_used.end());
        mid = a1.outputs[0];
      } else {
        F.pre_norm = true;
        F.attention_norm = false;
        mid = a1.outputs[0];
      }
      f_used.push_back(add1);
      auto next = mlp(mid, d, F, f_used, why);
      if (!next) continue;
      layer = F;
      hidden_ = d;
      if (form != Form::kPre) last_norm1_ = {kNoValue, {}};
      used.insert(used.end(), f_used.begin(), f_used.end());
      return next;
    }
  }
  if (why.reason.empty()) why = {"no_block", str_cat("no transformer block reads '", name(h), "'")};
  return std::nullopt;
}

std::optional<ValueId> Matcher::mlp(ValueId mid, int64_t d, EncoderLayerRef& L, Used& used,
                                    Fail& why) const {
  for (NodeId add2 : g_.value(mid).consumers) {
    if (!is(add2, "Add")) continue;
    const NodeInfo& a2 = g_.node(add2);
    const ValueId b2 = a2.input(0) == mid ? a2.input(1) : a2.input(0);
    if (broadcasts(mid, b2)) {
      why = {"block_shape",
             str_cat("the residual add '", a2.name, "' broadcasts its branch against the stream")};
      continue;
    }
    Used m_used;
    std::string ls2;
    ValueId fc2_out = b2;
    if (NodeId mul = producer_is(b2, "Mul"); mul != kNoNode) {
      for (int side = 0; side < 2; ++side) {
        const ValueId c = g_.node(mul).input(static_cast<size_t>(side));
        if (float_constant(c) && float_count(c) == d && non_shape_consumers(b2).size() == 1) {
          ls2 = name(c);
          m_used.push_back(mul);
          fc2_out = g_.node(mul).input(static_cast<size_t>(1 - side));
          break;
        }
      }
    }
    auto fc2 = linear(fc2_out, m_used);
    if (!fc2 || fc2->n != d) continue;
    ValueId u = kNoValue;
    Fail act_why;
    EncoderGlu glu = EncoderGlu::kNone;
    auto act = activation(fc2->x, u, m_used, act_why, &glu);
    if (!act) {
      why = act_why;
      continue;
    }
    auto fc1 = linear(u, m_used);
    const int64_t fc1_n = glu == EncoderGlu::kNone ? fc2->k : 2 * fc2->k;
    if (!fc1 || fc1->k != d || fc1->n != fc1_n) continue;
    ValueId next = kNoValue;
    if (L.pre_norm) {
      auto ln = layernorm(fc1->x, m_used);
      if (!ln || ln->x != mid) {
        why = {"block_shape", "the MLP input is not a LayerNorm of the stream"};
        continue;
      }
      L.norm2 = ln->ref;
      next = a2.outputs[0];
      m_used.push_back(add2);
    } else {
      if (fc1->x != mid) continue;
      m_used.push_back(add2);
      std::vector<Used> lu;
      auto lns = forward_layernorms(a2.outputs[0], {}, lu);
      if (lns.size() != 1) continue;
      L.norm2 = lns[0].second.ref;
      m_used.insert(m_used.end(), lu[0].begin(), lu[0].end());
      next = lns[0].first;
    }
    L.fc1 = fc1->ref;
    L.fc2 = fc2->ref;
    L.layer_scale2 = ls2;
    L.activation = *act;
    L.glu = glu;
    used.insert(used.end(), m_used.begin(), m_used.end());
    return next;
  }
  if (why.reason.empty()) why = {"block_shape", "no MLP after the attention"};
  return std::nullopt;
}

bool Matcher::stack(ValueId embedding, int64_t tokens, VisionEncoderClaim& enc, Stack& out,
                    Fail& why) const {
  std::set<NodeId> none;
  std::vector<ValueId>& stream = out.stream;
  ValueId h = embedding;
  Used& blocks_used = out.blocks_used;
  Fail first_why;
  EncoderLayerRef layer;
  auto first = block(h, tokens, layer, blocks_used, first_why);
  std::optional<Norm>& pre = out.pre;
  Used& pre_used = out.pre_used;
  if (!first) {
    std::vector<Used> lu;
    auto lns = forward_layernorms(embedding, none, lu);
    for (size_t i = 0; i < lns.size() && !first; ++i) {
      Fail w2;
      blocks_used.clear();
      first = block(lns[i].first, tokens, layer, blocks_used, w2);
      if (first) {
        pre = lns[i].second;
        pre_used = lu[i];
        h = lns[i].first;
      }
    }
  }
  if (!first) {
    why = first_why;
    return false;
  }
  // A block's first LayerNorm read outside too (e.g. CSE merged it with an identical tap norm).
  auto& norm1_outputs = out.norm1_outputs;
  stream.push_back(h);
  enc.layers.push_back(layer);
  if (layer.pre_norm && last_norm1_.first != kNoValue)
    norm1_outputs[last_norm1_.first] = {0, last_norm1_.second};
  h = *first;
  stream.push_back(h);
  for (;;) {
    Fail next_why;
    Used u;
    auto next = block(h, tokens, layer, u, next_why);
    if (next && layer.pre_norm && last_norm1_.first != kNoValue) {
      norm1_outputs[last_norm1_.first] = {static_cast<int>(stream.size() - 1), last_norm1_.second};
    }
    if (!next) break;
    blocks_used.insert(blocks_used.end(), u.begin(), u.end());
    enc.layers.push_back(layer);
    h = *next;
    stream.push_back(h);
  }
  // Each layer adds its own bias, if any (ModernBERT: a global and a sliding-window mask).
  enc.hidden = hidden_;
  enc.heads = heads_;
  enc.heads_source = heads_source_;
  if (pre) enc.pre_norm = pre->ref;
  return true;
}

}  // namespace npuflow::encoder
