// The encoder's attention calls: one call on the device or the host (attend), and SAM's ViT-Det
// geometry (grid_attention): windows cut from the token grid with zero padding, and the decomposed
// relative-position bias computed from q and the layer's tables, handed to the attention as its
// factors (never laid out as T x T).
#include <algorithm>
#include <cstring>

#include "core/strings.h"
#include "ops/device_attention.h"
#include "ops/host_attention.h"
#include "ops/vit_encoder.h"

namespace npuflow {
namespace {

// factors[i * keys + k] = q_i,h . table[query_at(i)][k] for head h and each query i of the
// T = rows x cols grid: q from the [q|k|v] rows, table [queries][head_dim][keys] (the loop over
// keys is an axpy per head dim: each factor still sums its head dim in order).
void relative_factors(const float* qkv, int64_t d, int64_t heads, int64_t h, int64_t rows,
                      int64_t cols, const std::vector<float>& table, bool by_row, float* factors) {
  const int64_t head_dim = d / heads, tokens = rows * cols, keys = by_row ? rows : cols;
  for (int64_t i = 0; i < tokens; ++i) {
    const float* q = qkv + i * 3 * d + h * head_dim;
    const int64_t at = by_row ? i / cols : i % cols;
    const float* rel = table.data() + at * head_dim * keys;
    float* out = factors + i * keys;
    std::fill(out, out + keys, 0.0f);
    for (int64_t c = 0; c < head_dim; ++c) {
      const float qc = q[c];
      const float* rel_c = rel + c * keys;
      for (int64_t k = 0; k < keys; ++k) out[k] += qc * rel_c[k];
    }
  }
}

}  // namespace

Status VitEncoder::attend(const Layer& L, size_t li, const float* qkv, int64_t span,
                          const AttentionBias& bias, float* ctx, const ExecContext& context) const {
  const int64_t d = hidden_;
  const bool on_device = device_attention_min_tokens_ && span >= *device_attention_min_tokens_ &&
                         static_cast<int64_t>(li) > last_hazard_;
  auto on_host = [&] {
    host_attention(qkv, {span, d, heads_}, L.scale, bias, L.nan_to_zero, ctx, context);
    return Status::ok();
  };
  if (!on_device) return on_host();
  bool expressible = true;
  return attention_fallback_.run(
      [&]() -> Status {
        const Status status = device_attention(*device_, qkv, {span, d, heads_}, L.scale, bias, ctx,
                                               context, &expressible);
        if (!expressible && !inexpressible_attention_logged_.exchange(true)) {
          logger_.info(str_cat(name_, ": a ", span, "-token attention runs on the host (",
                               status.message(), "; reported once)"));
        }
        // What fp16 or one mask cannot say is the host's by design, not a fallback.
        return expressible ? status : on_host();
      },
      on_host, fallback_calls_, logger_,
      [&](const Status& status) {
        return str_cat(name_, ": ", device_->name(), " did not take a ", span, "-token attention (",
                       status.to_string(), "); such calls run on the host (reported once)");
      });
}

Status VitEncoder::grid_attention(const Layer& L, size_t li, const float* attn_in, int64_t tokens,
                                  int64_t images, float* ctx, GridScratch& s,
                                  const ExecContext& context) const {
  const Layer::Grid& g = *L.grid;
  if (g.grid_h * g.grid_w != tokens) {
    return invalid_argument(str_cat(name_, ": ", tokens, " tokens are not the layer's ", g.grid_h,
                                    "x", g.grid_w, " grid"));
  }
  const int64_t d = hidden_;
  // The attended grid (a window, or the whole grid) and how many of them cover each image.
  const int64_t ws = g.window;
  const int64_t rows = ws > 0 ? ws : g.grid_h, cols = ws > 0 ? ws : g.grid_w;
  const int64_t across = ws > 0 ? (g.grid_w + ws - 1) / ws : 1;
  const int64_t down = ws > 0 ? (g.grid_h + ws - 1) / ws : 1;
  const int64_t span = rows * cols;
  const int64_t windows = images * down * across;
  const int64_t total = windows * span, padded = pad_rows(total);
  // Window w's row r holds token (y, x) of its image, or zeros where the padded grid has none.
  const auto token_of = [&](int64_t w, int64_t r) -> int64_t {
    const int64_t image = w / (down * across), at = w % (down * across);
    const int64_t y = at / across * rows + r / cols, x = at % across * cols + r % cols;
    return y < g.grid_h && x < g.grid_w ? image * tokens + y * g.grid_w + x : -1;
  };
  // The whole grid is the stream's own order (its padded rows already zero): it attends in place.
  const bool windowed = ws > 0;
  const float* rows_in = attn_in;
  float* rows_out = ctx;
  if (windowed) {
    s.windows.assign(static_cast<size_t>(padded * d), 0.0f);
    for (int64_t w = 0; w < windows; ++w) {
      for (int64_t r = 0; r < span; ++r) {
        const int64_t t = token_of(w, r);
        if (t >= 0) {
          std::memcpy(s.windows.data() + (w * span + r) * d, attn_in + t * d,
                      static_cast<size_t>(d) * 4);
        }
      }
    }
    s.ctx.resize(static_cast<size_t>(total * d));
    rows_in = s.windows.data();
    rows_out = s.ctx.data();
  }
  s.qkv.resize(static_cast<size_t>(padded * 3 * d));
  NPUFLOW_RETURN_IF_ERROR(project(L.qkv, rows_in, padded, total, s.qkv.data(), context));
  const bool relative = !g.rel_h.empty();
  if (relative) {
    // Every window's factors at once, a task per (window, head), laid out [window][head][query].
    s.rel_rows.resize(static_cast<size_t>(windows * heads_ * span * rows));
    s.rel_cols.resize(static_cast<size_t>(windows * heads_ * span * cols));
    context.run(static_cast<size_t>(windows * heads_), [&](size_t task) {
      const auto w = static_cast<int64_t>(task) / heads_, h = static_cast<int64_t>(task) % heads_;
      const float* qkv = s.qkv.data() + w * span * 3 * d;
      relative_factors(qkv, d, heads_, h, rows, cols, g.rel_h, true,
                       s.rel_rows.data() + (w * heads_ + h) * span * rows);
      relative_factors(qkv, d, heads_, h, rows, cols, g.rel_w, false,
                       s.rel_cols.data() + (w * heads_ + h) * span * cols);
    });
  }
  for (int64_t w = 0; w < windows; ++w) {
    const float* qkv = s.qkv.data() + w * span * 3 * d;
    AttentionBias bias;
    if (relative) {
      bias.relative = {s.rel_rows.data() + w * heads_ * span * rows,
                       s.rel_cols.data() + w * heads_ * span * cols, rows, cols};
    }
    NPUFLOW_RETURN_IF_ERROR(attend(L, li, qkv, span, bias, rows_out + w * span * d, context));
  }
  if (!windowed) return Status::ok();
  // Back to the tokens, the padding's rows dropped (the output projection is per row).
  for (int64_t w = 0; w < windows; ++w) {
    for (int64_t r = 0; r < span; ++r) {
      const int64_t t = token_of(w, r);
      if (t >= 0) {
        std::memcpy(ctx + t * d, s.ctx.data() + (w * span + r) * d, static_cast<size_t>(d) * 4);
      }
    }
  }
  return Status::ok();
}

}  // namespace npuflow
