// SAM's ViT-Det image encoder: pre-LN blocks on a channels-last [B, H, W, C] stream whose
// attention runs in windows cut from the zero-padded token grid (a Pad and a 6-D Reshape/Transpose
// after the first LayerNorm, undone with a crop before the residual add) or over the whole grid,
// with SAM's decomposed relative-position bias. Each partition is proven by replaying its chain on
// element indices against GridTiling; the kernel runs the geometry (EncoderLayerWeights::grid).
#include <algorithm>

#include "core/strings.h"
#include "graph/encoder/grid_tiling.h"
#include "graph/encoder/index_tensor.h"
#include "graph/encoder/matcher.h"

namespace npuflow::encoder {

std::optional<ValueId> Matcher::grid_block(ValueId h, EncoderLayerRef& layer, Used& used,
                                           Fail& why) const {
  const auto shape = static_shape(h);
  if (!shape || shape->size() != 4 || (*shape)[1] <= 0 || (*shape)[2] <= 0 || (*shape)[3] <= 0) {
    why = {"grid_shape", str_cat("the stream '", name(h), "' is not a static [B, H, W, C] grid")};
    return std::nullopt;
  }
  const int64_t batch = (*shape)[0] > 0 ? (*shape)[0] : 1;
  const int64_t height = (*shape)[1], width = (*shape)[2], channels = (*shape)[3];
  // Replays `ops` from iota(`from`) and compares with `expected` laid out as `to` (or, where the
  // projection reads it row by row, in any shape with the channels last).
  // Shape chains that read a value on the way (an unoptimized TorchScript graph's Reshape
  // targets) read its replayed shape.
  const auto moves_as = [&](const std::vector<NodeId>& ops, std::vector<int64_t> from,
                            const std::vector<int64_t>& to, const std::vector<int32_t>& expected,
                            bool rows_only = false) {
    ShapeEnv env;
    if (!ops.empty()) env[g_.node(ops.front()).input(0)] = from;
    IndexTensor t = IndexTensor::iota(std::move(from));
    return replay(t, ops, 0, &env) &&
           (rows_only ? !t.shape.empty() && t.shape.back() == to.back() : t.shape == to) &&
           t.data == expected;
  };
  const auto layout_op = [&](NodeId p, bool pad) {
    return is(p, "Reshape") || is(p, "Transpose") || (pad ? is(p, "Pad") : is(p, "Slice"));
  };
  // Walks back from `v` through layout ops (a Pad with `pad`, else a Slice) that only the chain
  // reads, until `reached(value)`: their nodes in forward order into `ops`, and whether it did.
  const auto peel = [&](ValueId v, bool pad, const auto& reached, std::vector<NodeId>& ops) {
    for (int guard = 0; guard < 8; ++guard) {
      if (reached(v)) {
        std::reverse(ops.begin(), ops.end());
        return true;
      }
      const NodeId p = producer(v);
      if (p == kNoNode || !layout_op(p, pad) || non_shape_consumers(v).size() != 1) return false;
      ops.push_back(p);
      v = g_.node(p).input(0);
    }
    return false;
  };
  for (NodeId add1 : g_.value(h).consumers) {
    if (!is(add1, "Add")) continue;
    const NodeInfo& a1 = g_.node(add1);
    const ValueId branch = a1.input(0) == h ? a1.input(1) : a1.input(0);
    if (branch == h || broadcasts(h, branch)) continue;
    // The output projection, behind the windows' unpartition (layout ops and a crop).
    Used local;
    std::vector<NodeId> unpartition;
    ValueId x = kNoValue;  // the projection's output
    std::optional<Linear> o;
    const auto projection = [&](ValueId v) {
      Used u;
      if (!(o = linear(v, u))) return false;
      local = u;
      x = v;
      return true;
    };
    if (!peel(branch, false, projection, unpartition)) continue;
    // The window size: one whose unpartition the chain replays (ORT may have folded the windows'
    // own shape into the projection's flatten, so it is not read off a shape), and whose token
    // count the attention's head split proves (a replay alone cannot tell bands of whole rows
    // from the whole grid). The whole grid is tried first.
    std::vector<GridTiling> tilings;
    if (unpartition.empty()) {
      tilings.push_back(GridTiling::of(batch, height, width, channels, 0));
    } else if (const auto known = static_shape(x); known && !known->empty()) {
      // The projection's output: its static dims, or (shape inference left some unknown) the
      // windows' shape each window size implies, in its rank.
      int64_t count = 1;
      for (int64_t dim : *known) count = dim > 0 && count > 0 ? count * dim : -1;
      const int64_t largest =
          count > 0 ? count : 4 * std::max(height, width) * std::max(height, width) * channels;
      // The windows' own shape [windows, w, w, C], where the projection writes it, names the
      // size to try first; the others are searched only when that one does not replay (each
      // replay moves every element of a 4096-token grid).
      const int64_t named =
          known->size() == 4 && (*known)[1] > 0 && (*known)[1] == (*known)[2] ? (*known)[1] : -1;
      std::vector<int64_t> sizes;
      if (named > 0) sizes.push_back(named);
      // A window may exceed the grid (one window over the padded grid).
      for (int64_t window = 0; window * window * channels <= largest; ++window)
        if (window != named) sizes.push_back(window);
      for (int64_t window : sizes) {
        const GridTiling t = GridTiling::of(batch, height, width, channels, window);
        std::vector<int64_t> from = *known;
        if (count < 0) {
          if (known->size() == 4) from = {t.windows(), t.rows, t.cols, channels};
          if (known->size() == 3) from = {t.windows(), t.rows * t.cols, channels};
          if (known->size() == 2) from = {t.windows() * t.rows * t.cols, channels};
          bool fits = from.size() == known->size();
          for (size_t i = 0; fits && i < from.size(); ++i)
            fits = (*known)[i] < 0 || (*known)[i] == from[i];
          if (!fits) continue;
        } else if (count != t.windows() * t.rows * t.cols * channels) {
          continue;
        }
        if (moves_as(unpartition, from, {batch, height, width, channels}, t.unpartitioned())) {
          tilings.push_back(t);
          if (window == named) break;
        }
      }
    }
    if (tilings.empty()) {
      why = {"window_partition",
             str_cat("'", g_.node(unpartition.back()).name, "' does not put any window size's ",
                     "tokens back where a window partition of the ", height, "x", width,
                     " grid took them from")};
      continue;
    }
    local.insert(local.end(), unpartition.begin(), unpartition.end());
    std::optional<Attention> att;
    GridTiling tiling;
    Fail att_why;
    for (const GridTiling& t : tilings) {
      Used att_used;
      att_why = {};
      if ((att = attention(*o, t.rows * t.cols, att_used, att_why, t.cols))) {
        tiling = t;
        local.insert(local.end(), att_used.begin(), att_used.end());
        break;
      }
    }
    if (!att) {
      why = att_why.reason.empty() ? Fail{"block_shape", "no attention before the projection"}
                                   : att_why;
      continue;
    }
    if (att->rope_cos != kNoValue) {
      why = {"block_shape", "a grid attention with a rotary embedding"};
      continue;
    }
    GridRef grid{height, width, tiling.window, {}, {}, {}, {}};
    if (att->bias != kNoValue && !grid_rel_pos(att->bias, *att, tiling, grid, local, why)) continue;
    // The windows the projections read: a partition (zero Pad, layout ops) of LN1(h).
    std::vector<NodeId> partition;
    ValueId normed = kNoValue;  // the LayerNorm's output
    std::optional<Norm> ln;
    const auto norm_of_stream = [&](ValueId v) {
      Used u;
      if (!(ln = layernorm(v, u)) || ln->x != h) return false;
      local.insert(local.end(), u.begin(), u.end());
      normed = v;
      return true;
    };
    if (!peel(att->x, true, norm_of_stream, partition) ||
        !moves_as(partition, {batch, height, width, channels},
                  {tiling.windows(), tiling.rows, tiling.cols, channels}, tiling.partitioned(),
                  /*rows_only=*/true)) {
      why = {"window_partition",
             str_cat("the attention does not read a ", tiling.rows, "x", tiling.cols,
                     " window partition of a LayerNorm of the ", height, "x", width, " stream")};
      continue;
    }
    local.insert(local.end(), partition.begin(), partition.end());
    EncoderLayerRef L;
    L.pre_norm = true;
    L.norm1 = ln->ref;
    take_attention(*att, L);
    L.o = o->ref;
    L.grid = std::move(grid);
    local.push_back(add1);
    auto next = mlp(a1.outputs[0], att->d, L, local, why);
    if (!next) continue;
    heads_ = att->heads;
    heads_source_ = att->heads_source;
    hidden_ = att->d;
    last_norm1_ = {normed, ln->ref};
    layer = std::move(L);
    used.insert(used.end(), local.begin(), local.end());
    return next;
  }
  if (why.reason.empty()) why = {"no_block", str_cat("no grid block reads '", name(h), "'")};
  return std::nullopt;
}

std::optional<Claim> Matcher::run_grid(NodeId conv_id, Fail& why) {
  // The stream: the patch embedding transposed to [B, H, W, C] with its position embedding
  // added (either order); the claim starts there and the embedding stays on the CPU EP.
  ValueId v = g_.node(conv_id).outputs[0];
  for (int step = 0; step < 2; ++step) {
    const std::vector<NodeId> readers = non_shape_consumers(v);
    if (readers.size() != 1) break;
    const NodeInfo& next = g_.node(readers[0]);
    const bool transpose = is(readers[0], "Transpose") && perm_of(next) &&
                           *perm_of(next) == std::vector<int64_t>{0, 2, 3, 1};
    const bool position =
        is(readers[0], "Add") && (float_constant(next.input(0)) || float_constant(next.input(1)));
    if (!transpose && !position) break;
    v = next.outputs[0];
  }
  const auto shape = static_shape(v);
  if (!shape || shape->size() != 4 || (*shape)[1] <= 0 || (*shape)[2] <= 0) {
    why = {"grid_shape", "the channels-last patch grid has no static height and width"};
    return std::nullopt;
  }
  VisionEncoderClaim enc;
  Embedding emb;
  emb.value = v;
  emb.tokens = (*shape)[1] * (*shape)[2];
  Stack s;
  grid_mode_ = true;
  const bool stacked = stack(v, emb.tokens, enc, s, why);
  grid_mode_ = false;
  if (!stacked) return std::nullopt;
  auto claimed = close_claim(emb, s, false, enc, why);
  if (!claimed || !constants_fit(enc, emb.tokens, why)) return std::nullopt;
  enc.note = str_cat(
      "the patch embedding and position embedding run on the CPU EP; the claim "
      "starts at the ",
      (*shape)[1], "x", (*shape)[2], " token grid");
  enc.family = encoder_family(enc);
  return encoder_claim(g_.node(conv_id).name, *claimed, std::move(enc));
}

}  // namespace npuflow::encoder
