#include <algorithm>
#include <set>

#include "core/strings.h"
#include "graph/encoder/matcher.h"

namespace npuflow::encoder {

std::vector<int32_t> head_split_indices(int64_t batch, int64_t tokens, int64_t d, int64_t heads,
                                        int64_t stride, int64_t offset, bool keys) {
  const int64_t dh = d / heads;
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(batch * tokens * d));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const auto at = [&](int64_t t, int64_t c) {
        return static_cast<int32_t>((b * tokens + t) * stride + offset + h * dh + c);
      };
      if (keys) {
        for (int64_t c = 0; c < dh; ++c)
          for (int64_t t = 0; t < tokens; ++t) out.push_back(at(t, c));
      } else {
        for (int64_t t = 0; t < tokens; ++t)
          for (int64_t c = 0; c < dh; ++c) out.push_back(at(t, c));
      }
    }
  }
  return out;
}

std::optional<Attention> Matcher::attention(const Linear& o, int64_t tokens, Used& used, Fail& why,
                                            int64_t grid_w) const {
  Used local;
  std::vector<NodeId> merge;
  ValueId v = o.x;
  for (NodeId p = producer(v); p != kNoNode; p = producer(v)) {
    const NodeInfo& node = g_.node(p);
    if ((node.op_type != "Reshape" && node.op_type != "Transpose") || !is_standard_domain(node))
      break;
    if (non_shape_consumers(v).size() != 1) return std::nullopt;
    merge.push_back(p);
    local.push_back(p);
    v = node.input(0);
  }
  std::reverse(merge.begin(), merge.end());
  // ORT folds a static head-merge Reshape into the flatten in front of the output Gemm.
  if (o.flatten != kNoNode) merge.push_back(o.flatten);
  const NodeId pv = producer_is(v, "MatMul");
  if (pv == kNoNode || merge.empty()) return std::nullopt;
  local.push_back(pv);
  ValueId probs = g_.node(pv).input(0);
  const ValueId vh = g_.node(pv).input(1);
  // softmax(..., dtype=float32).to(dtype) exports a Cast; eval-mode Dropout may stay; SDPA
  // decompositions zero a fully masked row's NaNs: Where(IsNaN(P), 0, P).
  bool nan_to_zero = false;
  for (int guard = 0; guard < 4; ++guard) {
    const NodeId p = producer(probs);
    if (non_shape_consumers(probs).size() != 1 || p == kNoNode ||
        g_.value(g_.node(p).outputs[0]).type != ElementType::kFloat32)
      break;
    const NodeInfo& node = g_.node(p);
    if (is(p, "Where") && !nan_to_zero) {
      const NodeId isnan = producer_is(node.input(0), "IsNaN");
      Used zero;
      const auto fill = scalar(node.input(1), zero);
      if (isnan == kNoNode || g_.node(isnan).input(0) != node.input(2) || !fill || *fill != 0.0f ||
          non_shape_consumers(node.input(0)).size() != 1)
        break;
      nan_to_zero = true;
      local.insert(local.end(), zero.begin(), zero.end());
      local.push_back(isnan);
      local.push_back(p);
      probs = node.input(2);
      continue;
    }
    // Dropout only as exported for inference: no training_mode input, or a constant false one.
    if (is(p, "Dropout") && node.input(2) != kNoValue) {
      const ValueId mode = through_identity(node.input(2));
      const ValueInfo& info = g_.value(mode);
      if (!g_.is_constant(mode) || info.constant->bytes != 1 ||
          *static_cast<const uint8_t*>(info.constant->data) != 0)
        break;
    }
    if (!(is(p, "Cast") || is(p, "Identity") || is(p, "Dropout"))) break;
    local.push_back(p);
    probs = node.input(0);
  }
  const NodeId softmax = producer_is(probs, "Softmax");
  if (softmax == kNoNode) {
    why = {"attention_shape", "P @ V does not read a Softmax"};
    return std::nullopt;
  }
  {
    const NodeInfo& sm = g_.node(softmax);
    const int64_t axis = sm.int_attribute("axis", -1);
    if (axis != -1 && axis != 3) {
      why = {"attention_shape", str_cat("Softmax over axis ", axis)};
      return std::nullopt;
    }
  }
  local.push_back(softmax);
  float scale = 1.0f;
  ValueId s = g_.node(softmax).input(0);
  // An additive bias right before the Softmax (a text encoder's padding mask), when it is a
  // runtime value computed outside the attention that broadcasts to the scores [B, H, T, T]
  // (the plan aligns its dims at run time, as ONNX broadcasting does).
  ValueId bias = kNoValue;
  if (NodeId add = producer_is(s, "Add"); add != kNoNode) {
    for (int side = 0; side < 2 && bias == kNoValue; ++side) {
      const ValueId candidate = g_.node(add).input(static_cast<size_t>(side));
      const auto dims = static_shape(candidate);
      Used zero;  // a mask that is zero everywhere is no bias: claimed below, not an input
      if (g_.is_constant(through_identity(candidate)) || zero_mask(candidate, zero) ||
          g_.value(candidate).type != ElementType::kFloat32 || (dims && dims->size() > 4))
        continue;
      ValueId scores = g_.node(add).input(static_cast<size_t>(1 - side));
      for (NodeId p = producer(scores); is(p, "Mul") || is(p, "Div"); p = producer(scores))
        scores = g_.node(p).input(0);
      if (producer_is(scores, "MatMul") == kNoNode) continue;
      bias = candidate;
      s = g_.node(add).input(static_cast<size_t>(1 - side));
      local.push_back(add);
    }
  }
  for (int guard = 0; guard < 4; ++guard) {
    const NodeId p = producer(s);
    if (is(p, "Add")) {
      const NodeInfo& add = g_.node(p);
      Used mask;
      const int zero = zero_mask(add.input(1), mask) ? 1 : zero_mask(add.input(0), mask) ? 0 : -1;
      if (zero < 0) {
        why = {"attention_mask",
               "the attention scores get an additive mask the plan cannot honour"};
        return std::nullopt;
      }
      local.insert(local.end(), mask.begin(), mask.end());
      local.push_back(p);
      s = add.input(1 - zero);
      continue;
    }
    if (!is(p, "Mul") && !is(p, "Div")) break;
    const NodeInfo& node = g_.node(p);
    Used sc;
    if (auto c = scalar(node.input(1), sc)) {
      scale = node.op_type == "Mul" ? scale * *c : scale / *c;
      s = node.input(0);
    } else if (node.op_type == "Mul" && (c = scalar(node.input(0), sc))) {
      scale *= *c;
      s = node.input(1);
    } else {
      why = {"attention_mask", "the attention scores are scaled by a tensor"};
      return std::nullopt;
    }
    local.insert(local.end(), sc.begin(), sc.end());
    local.push_back(p);
  }
  const NodeId qk = producer_is(s, "MatMul");
  if (qk == kNoNode) {
    why = {"attention_shape", "the Softmax does not read Q @ K^T"};
    return std::nullopt;
  }
  local.push_back(qk);
  auto q = layout_chain(g_.node(qk).input(0), scale, local, true, true, true);
  auto k = layout_chain(g_.node(qk).input(1), scale, local, true, true, true);
  float no_scale = 1.0f;
  auto val = layout_chain(vh, no_scale, local, false);
  if (!q || !k || !val) {
    why = {"attention_shape", "Q, K or V is not a head split of a linear projection"};
    return std::nullopt;
  }
  if (q->rope.has_value() != k->rope.has_value()) {
    why = {"rotary_layout", "Q is rotated and K is not, or K and not Q"};
    return std::nullopt;
  }
  if (q->linear.x != k->linear.x || q->linear.x != val->linear.x) {
    why = {"attention_inputs", "Q, K and V do not read the same tensor"};
    return std::nullopt;
  }
  const int64_t d = q->linear.k;
  // Separate projections, or one fused projection whose output q, k and v each select a part
  // of (Split, Slice, or Reshape [B,T,3,H,dh] + Transpose + Gather).
  const int selectors =
      (q->selector != kNoNode) + (k->selector != kNoNode) + (val->selector != kNoNode);
  const bool fused = selectors > 0;
  if (fused) {
    if (selectors != 3 || q->fused != k->fused || q->fused != val->fused ||
        q->linear.ref.weight != k->linear.ref.weight ||
        q->linear.ref.weight != val->linear.ref.weight) {
      why = {"fused_qkv", "Q, K and V do not all select a part of the same fused projection"};
      return std::nullopt;
    }
    // Nothing but the three selectors (one Split, or three Slices/Gathers) reads the fused
    // value, and each Split output is one part.
    const std::set<NodeId> selected = {q->selector, k->selector, val->selector};
    const std::vector<NodeId> readers = non_shape_consumers(q->fused);
    if (std::set<NodeId>(readers.begin(), readers.end()) != selected ||
        readers.size() != selected.size() ||
        (selected.size() == 1 && g_.node(q->selector).outputs.size() != 3) ||
        (selected.size() != 1 && selected.size() != 3)) {
      why = {"fused_qkv", str_cat("the fused projection '", name(q->fused),
                                  "' is read by other nodes than the Q, K and V selectors")};
      return std::nullopt;
    }
    if (q->linear.n != 3 * d) {
      why = {"fused_qkv", str_cat("the fused projection has ", q->linear.n,
                                  " output columns, not 3 x hidden (", 3 * d, ")")};
      return std::nullopt;
    }
  } else if (q->linear.n != d || k->linear.n != d || val->linear.n != d) {
    why = {"attention_shape", "Q, K and V projections are not square"};
    return std::nullopt;
  }
  Attention att;
  att.x = q->linear.x;
  att.q = q->linear.ref;
  att.k = k->linear.ref;
  att.v = val->linear.ref;
  att.d = d;
  att.scale = scale;
  // Replay the layouts on index tensors: Q, V -> [B,H,T,dh], K -> [B,H,dh,T], merge -> [B,T,D].
  // The source is the projection's output [B,T,N] (N = 3D when fused); a part's expected
  // values are its D columns at `offset`. B is the stream's batch where the export fixed it (a
  // windowed encoder's windows), else 1: shape chains read a dynamic batch as 1.
  const int64_t t = tokens > 0 ? tokens : 5;
  const int64_t n = fused ? 3 * d : d;
  const auto stream_shape = static_shape(q->linear.x);
  int64_t b =
      stream_shape && stream_shape->size() == 3 && (*stream_shape)[0] > 1 ? (*stream_shape)[0] : 1;
  if (grid_w > 0 && stream_shape && stream_shape->size() >= 3) {
    // A grid [B, rows, cols, D] (SAM's windows, in whatever view the projection reads them):
    // B from its static dims, when they are.
    int64_t count = 1;
    for (int64_t dim : *stream_shape) count = dim > 0 && count > 0 ? count * dim : -1;
    if (count > 0 && count % (t * d) == 0) b = count / (t * d);
  }
  auto source = [&] {
    IndexTensor x;
    x.shape = {b, t, n};
    x.data.resize(static_cast<size_t>(b * t * n));
    for (size_t i = 0; i < x.data.size(); ++i) x.data[i] = static_cast<int32_t>(i);
    return x;
  };
  auto expect = [&](int64_t h, bool key, int64_t stride, int64_t offset) {
    return head_split_indices(b, t, d, h, stride, offset, key);
  };
  // A fused part is the block of D columns its replay lands in: [0,D) q, [D,2D) k, [2D,3D) v,
  // nothing else (a part of another width, straddling two blocks, or two parts swapped).
  struct Part {
    bool replayed = false;
    int64_t lo = 0, hi = 0;  // the columns it reads
  };
  // The stream the projections read is [b, t, d] in every replay: shape chains that read it
  // (or any value a replay passes through) resolve against the replayed geometry.
  ShapeEnv env;
  env[q->linear.x] = {b, t, d};
  auto replay_part = [&](IndexTensor& x, const Chain& chain) {
    Part part;
    part.replayed = replay(x, chain.ops, chain.split_output, &env) && !x.data.empty();
    if (part.replayed && chain.rope) {
      // The rotation moves no data, but shape chains read its output (an SDPA decomposition
      // reshapes by Shape(q)): record the layout it has, that of the ops up to it.
      IndexTensor upto = source();
      const auto end =
          chain.ops.begin() + static_cast<std::ptrdiff_t>(chain.rope->at + chain.rope->layout_ops);
      if (replay(upto, std::vector<NodeId>(chain.ops.begin(), end), chain.split_output, &env))
        env[chain.rope->output] = upto.shape;
    }
    if (part.replayed) {
      part.lo = n;
      for (int32_t i : x.data) {
        part.lo = std::min<int64_t>(part.lo, i % n);
        part.hi = std::max<int64_t>(part.hi, i % n + 1);
      }
    }
    return part;
  };
  IndexTensor tq = source(), tk = source(), tv = source();
  const Part part_q = replay_part(tq, *q), part_k = replay_part(tk, *k),
             part_v = replay_part(tv, *val);
  if (fused && part_q.replayed && part_k.replayed && part_v.replayed) {
    const Part* parts[3] = {&part_q, &part_k, &part_v};
    const char* names[3] = {"q", "k", "v"};
    std::vector<std::string> ranges;
    bool blocks = true, ordered = true;
    for (int i = 0; i < 3; ++i) {
      ranges.push_back(str_cat(names[i], " [", parts[i]->lo, ",", parts[i]->hi, ")"));
      blocks &= parts[i]->hi - parts[i]->lo == d && parts[i]->lo % d == 0;
      ordered &= parts[i]->lo == i * d;
    }
    if (!blocks) {
      why = {"fused_qkv_split",
             str_cat("the fused projection's ", n, " columns are not split into three blocks of ",
                     d, ": ", join(ranges, ", "))};
      return std::nullopt;
    }
    if (!ordered) {
      why = {"fused_qkv_order",
             str_cat("the fused projection's blocks are not q|k|v in that order: ",
                     join(ranges, ", "))};
      return std::nullopt;
    }
    att.q.col_begin = 0;
    att.k.col_begin = d;
    att.v.col_begin = 2 * d;
    att.q.cols = att.k.cols = att.v.cols = d;
  }
  // The head count: the knob's, else the graph's split reshape, else any divisor of d. The one
  // taken is the first whose split and merge the replay proves (with a single token every count
  // moves data alike, and computes alike).
  std::vector<int64_t> candidates;
  att.heads_source = options_.heads > 0 ? "knob" : "graph";
  if (options_.heads > 0) {
    candidates.push_back(options_.heads);
  } else {
    if (auto h = heads_of(q->ops)) candidates.push_back(*h > 0 ? *h : (d % -*h ? 0 : d / -*h));
    for (int64_t h = 1; h <= d; ++h)
      if (d % h == 0) candidates.push_back(h);
  }
  bool ok_q = false, ok_k = false, ok_v = false, ok_m = false;
  int64_t tried = 0;
  for (int64_t h : candidates) {
    if (h <= 0 || d % h != 0) continue;
    tried = h;
    // The layouts, not only the data order: a size-1 batch axis moved elsewhere keeps the order
    // but changes every shape after it (the CPU EP then broadcasts the residual add).
    std::vector<int64_t> heads_shape = {b, h, t, d / h}, keys_shape = {b, h, d / h, t};
    // A grid attention may run with images and heads on one axis ([B H, T, dh], SAM's eager
    // attention): the same products, when q, k and v all have it.
    if (grid_w > 0 && tq.shape.size() == 3 && tk.shape.size() == 3 && tv.shape.size() == 3) {
      heads_shape = {b * h, t, d / h};
      keys_shape = {b * h, d / h, t};
    }
    ok_q = part_q.replayed && tq.shape == heads_shape && tq.data == expect(h, false, n, 0);
    ok_k =
        part_k.replayed && tk.shape == keys_shape && tk.data == expect(h, true, n, fused ? d : 0);
    ok_v = part_v.replayed && tv.shape == heads_shape &&
           tv.data == expect(h, false, n, fused ? 2 * d : 0);
    IndexTensor tm;
    tm.shape = {b, h, t, d / h};
    tm.data = expect(h, false, d, 0);
    ShapeEnv merge_env = env;
    // The merged heads in token-major order with D last: [B, T, D], or [B*T, D] for a Gemm.
    // The shape too: a merge to [T, B, D] keeps the order of a batch of 1 but makes the CPU EP
    // broadcast the residual add to [T, T, D].
    ok_m =
        replay(tm, merge, 0, &merge_env) &&
        (tm.shape == std::vector<int64_t>{b, t, d} || tm.shape == std::vector<int64_t>{b * t, d} ||
         (grid_w > 0 && tm.shape == std::vector<int64_t>{b, t / grid_w, grid_w, d}));
    for (size_t i = 0; ok_m && i < tm.data.size(); ++i)
      ok_m = tm.data[i] == static_cast<int32_t>(i);
    if (ok_q && ok_k && ok_v && ok_m) {
      att.heads = h;
      break;
    }
  }
  if (att.heads > 0 && q->rope &&
      (!rotary_fits(*q, att.heads, d, t, n, 0, env, why) ||
       !rotary_fits(*k, att.heads, d, t, n, fused ? d : 0, env, why) ||
       !same_rotary(*q->rope, *k->rope, why)))
    return std::nullopt;
  if (q->rope && q->rope->probed) {
    att.rope_cos_values = q->rope->cos_values;
    att.rope_sin_values = q->rope->sin_values;
  } else if (q->rope) {
    att.rope_cos = q->rope->cos;
    att.rope_sin = q->rope->sin;
    att.rope_perm = q->rope->table_perm;
  }
  if (tried == 0) {
    why = {"heads_unknown",
           str_cat("NPUFLOW_HEADS=", options_.heads, " does not divide the hidden size ", d)};
    return std::nullopt;
  }
  if (att.heads == 0) {
    const int64_t h = candidates.front() > 0 ? candidates.front() : tried;
    why = {"attention_layout",
           str_cat("the head split/merge does not move data as ", h, " heads of ", d / h,
                   " would, nor as any other head count (q ", ok_q, " k ", ok_k, " v ", ok_v,
                   " merge ", ok_m, ")", fused ? " from a fused projection" : "",
                   att.heads_source == "knob" ? " with NPUFLOW_HEADS" : "")};
    return std::nullopt;
  }
  att.fused = fused;
  att.bias = bias;
  att.nan_to_zero = nan_to_zero;
  used.insert(used.end(), local.begin(), local.end());
  return att;
}

}  // namespace npuflow::encoder
