#include "ops/host_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/avx2_math.h"
#include "ops/host_attention_tiles.h"
#include "ops/simd.h"

namespace npuflow {
namespace {

using attention_tiles::Block;
using attention_tiles::kKeyTile;

// Queries per task: a block's scores (kQueryBlock x T floats) stay in L2 between the QK^T, the
// softmax and the PV passes, and the key/value panels are reused across the block's rows.
constexpr int64_t kQueryBlock = 32;

int64_t padded_keys(int64_t tokens) {
  return (tokens + kKeyTile - 1) / kKeyTile * kKeyTile;
}

void scores_portable(const Block& b) {
  for (int64_t r = 0; r < b.rows; ++r) {
    float* s = b.scores + r * b.ld_scores;
    std::fill(s, s + b.ld_scores, 0.0f);
    for (int64_t j0 = 0; j0 < b.ld_scores; j0 += kKeyTile) {
      const float* panel = b.kt + j0 * b.dh;
      for (int64_t c = 0; c < b.dh; ++c) {
        const float qc = b.q[r * b.ld_qkv + c];
        for (int64_t j = 0; j < kKeyTile; ++j) s[j0 + j] += qc * panel[c * kKeyTile + j];
      }
    }
  }
}

void context_portable(const Block& b) {
  for (int64_t r = 0; r < b.rows; ++r) {
    float* out = b.out + r * b.ld_out;
    std::fill(out, out + b.dh, 0.0f);
    const float* p = b.scores + r * b.ld_scores;
    for (int64_t j = 0; j < b.tokens; ++j) {
      const float* v = b.v + j * b.dh;
      for (int64_t c = 0; c < b.dh; ++c) out[c] += p[j] * v[c];
    }
  }
}

// Scaled, biased scores -> probabilities in place; the sum and max as the reference computes them
// (NaN scores are skipped by the max, a row of -inf gives NaN probabilities).
void softmax_row_portable(float* s, int64_t n, float scale, const float* bias, int64_t bias_stride,
                          bool nan_to_zero) {
  float mx = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    s[j] = bias ? s[j] * scale + bias[j * bias_stride] : s[j] * scale;
    mx = std::max(mx, s[j]);
  }
  float sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    s[j] = std::exp(s[j] - mx);
    sum += s[j];
  }
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < n; ++j) {
    const float p = s[j] * inv;
    s[j] = nan_to_zero && std::isnan(p) ? 0.0f : p;
  }
}

#if NPUFLOW_HAVE_AVX2_KERNELS
constexpr int64_t kRowTile = 4;  // query rows per register tile

// s[r][j0..j0+16) for R query rows: q broadcast, the panel's keys loaded as two vectors per
// head dim, all from one contiguous dh x 16 panel.
template <int R>
NPUFLOW_TARGET_AVX2 inline void scores_tile(const Block& b, int64_t r0, int64_t j0) {
  __m256 acc[R][2];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  const float* q = b.q + r0 * b.ld_qkv;
  const float* panel = b.kt + j0 * b.dh;
  for (int64_t c = 0; c < b.dh; ++c) {
    const __m256 k0 = _mm256_loadu_ps(panel + c * kKeyTile);
    const __m256 k1 = _mm256_loadu_ps(panel + c * kKeyTile + 8);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m256 qv = _mm256_broadcast_ss(q + r * b.ld_qkv + c);
      acc[r][0] = _mm256_fmadd_ps(qv, k0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(qv, k1, acc[r][1]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(b.scores + (r0 + r) * b.ld_scores + j0, acc[r][0]);
    _mm256_storeu_ps(b.scores + (r0 + r) * b.ld_scores + j0 + 8, acc[r][1]);
  }
}

NPUFLOW_TARGET_AVX2 void scores_avx2(const Block& b) {
  // Panels outer: one dh x 16 panel (4 KiB at dh 64) stays in L1 for all the block's rows.
  for (int64_t j0 = 0; j0 < b.ld_scores; j0 += kKeyTile) {
    int64_t r0 = 0;
    for (; r0 + kRowTile <= b.rows; r0 += kRowTile) scores_tile<4>(b, r0, j0);
    switch (b.rows - r0) {
      case 3:
        scores_tile<3>(b, r0, j0);
        break;
      case 2:
        scores_tile<2>(b, r0, j0);
        break;
      case 1:
        scores_tile<1>(b, r0, j0);
        break;
      default:
        break;
    }
  }
}

// out[r][c0..c0+8W) = sum_j p[r][j] v[j][c0..] for R rows.
template <int R, int W>
NPUFLOW_TARGET_AVX2 inline void context_tile(const Block& b, int64_t r0, int64_t c0) {
  __m256 acc[R][W];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int w = 0; w < W; ++w) acc[r][w] = _mm256_setzero_ps();
  const float* p = b.scores + r0 * b.ld_scores;
  for (int64_t j = 0; j < b.tokens; ++j) {
    __m256 v[W];
#pragma GCC unroll 16
    for (int w = 0; w < W; ++w) v[w] = _mm256_loadu_ps(b.v + j * b.dh + c0 + 8 * w);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m256 pv = _mm256_broadcast_ss(p + r * b.ld_scores + j);
#pragma GCC unroll 16
      for (int w = 0; w < W; ++w) acc[r][w] = _mm256_fmadd_ps(pv, v[w], acc[r][w]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int w = 0; w < W; ++w)
      _mm256_storeu_ps(b.out + (r0 + r) * b.ld_out + c0 + 8 * w, acc[r][w]);
}

template <int R>
NPUFLOW_TARGET_AVX2 void context_rows(const Block& b, int64_t r0) {
  int64_t c0 = 0;
  for (; c0 + 16 <= b.dh; c0 += 16) context_tile<R, 2>(b, r0, c0);
  for (; c0 + 8 <= b.dh; c0 += 8) context_tile<R, 1>(b, r0, c0);
  for (int r = 0; r < R && c0 < b.dh; ++r) {
    float* out = b.out + (r0 + r) * b.ld_out;
    const float* p = b.scores + (r0 + r) * b.ld_scores;
    for (int64_t c = c0; c < b.dh; ++c) {
      // Fused as the vector lanes are (and as the AVX-512 kernel's masked tail is).
      float sum = 0;
      for (int64_t j = 0; j < b.tokens; ++j) sum = std::fma(p[j], b.v[j * b.dh + c], sum);
      out[c] = sum;
    }
  }
}

NPUFLOW_TARGET_AVX2 void context_avx2(const Block& b) {
  int64_t r0 = 0;
  for (; r0 + kRowTile <= b.rows; r0 += kRowTile) context_rows<4>(b, r0);
  switch (b.rows - r0) {
    case 3:
      context_rows<3>(b, r0);
      break;
    case 2:
      context_rows<2>(b, r0);
      break;
    case 1:
      context_rows<1>(b, r0);
      break;
    default:
      break;
  }
}

NPUFLOW_TARGET_AVX2 void softmax_row_avx2(float* s, int64_t n, float scale, const float* bias,
                                          int64_t bias_stride, bool nan_to_zero) {
  const __m256 scale_v = _mm256_set1_ps(scale);
  __m256 mx_v = _mm256_set1_ps(-INFINITY);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 x = _mm256_mul_ps(_mm256_loadu_ps(s + j), scale_v);
    if (bias) {
      x = _mm256_add_ps(
          x, bias_stride == 1 ? _mm256_loadu_ps(bias + j) : _mm256_set1_ps(bias[j * bias_stride]));
    }
    _mm256_storeu_ps(s + j, x);
    mx_v = _mm256_max_ps(x, mx_v);  // a NaN x leaves the running max alone, as std::max does
  }
  float mx = avx2::horizontal_max(mx_v);
  for (; j < n; ++j) {
    s[j] = bias ? s[j] * scale + bias[j * bias_stride] : s[j] * scale;
    mx = std::max(mx, s[j]);
  }
  const __m256 shift = _mm256_set1_ps(mx);
  __m256 sum_v = _mm256_setzero_ps();
  for (j = 0; j + 8 <= n; j += 8) {
    const __m256 e = avx2::exp(_mm256_sub_ps(_mm256_loadu_ps(s + j), shift));
    _mm256_storeu_ps(s + j, e);
    sum_v = _mm256_add_ps(sum_v, e);
  }
  float sum = avx2::horizontal_sum(sum_v);
  for (; j < n; ++j) {
    s[j] = std::exp(s[j] - mx);
    sum += s[j];
  }
  const float inv = 1.0f / sum;
  const __m256 inv_v = _mm256_set1_ps(inv);
  for (j = 0; j + 8 <= n; j += 8) {
    __m256 p = _mm256_mul_ps(_mm256_loadu_ps(s + j), inv_v);
    if (nan_to_zero) p = _mm256_andnot_ps(_mm256_cmp_ps(p, p, _CMP_UNORD_Q), p);
    _mm256_storeu_ps(s + j, p);
  }
  for (; j < n; ++j) {
    const float p = s[j] * inv;
    s[j] = nan_to_zero && std::isnan(p) ? 0.0f : p;
  }
}
#endif

// Query row i of head h under a relative bias: s[j] = (scale s[j] + dense) + row term, and the
// column terms laid out over the keys (thread-local, T floats), returned for the softmax's bias.
const float* add_relative_row_term(const AttentionBias& bias, int64_t h, int64_t i, int64_t tokens,
                                   float scale, float* s) {
  const RelativeAttentionBias& rel = bias.relative;
  const float* dense = bias.data ? bias.data + h * bias.head_stride + i * bias.row_stride : nullptr;
  const float* rows = rel.rows + (h * tokens + i) * rel.grid_h;
  const float* cols = rel.cols + (h * tokens + i) * rel.grid_w;
  thread_local std::vector<float> col_terms;
  col_terms.resize(static_cast<size_t>(tokens));
  for (int64_t y = 0, j = 0; y < rel.grid_h; ++y) {
    for (int64_t x = 0; x < rel.grid_w; ++x, ++j) {
      const float scaled = dense ? s[j] * scale + dense[j * bias.col_stride] : s[j] * scale;
      s[j] = scaled + rows[y];
      col_terms[j] = cols[x];
    }
  }
  return col_terms.data();
}

}  // namespace

void host_attention(const float* qkv, const AttentionShape& shape, float scale,
                    const AttentionBias& bias, bool nan_to_zero, float* ctx,
                    const ExecContext& context) {
  const int64_t tokens = shape.tokens, d = shape.hidden, heads = shape.heads, dh = d / heads;
  if (tokens <= 0) return;
  const bool vectorized = avx2_kernels_active();
  const bool wide = avx512_kernels_active();
  // K^T in panels and V (heads x T x dh) per head, laid out once so every query block streams
  // them from contiguous memory (the fused rows are 3D apart: a page per row).
  const int64_t tokens_padded = padded_keys(tokens);
  thread_local std::vector<float> keys_transposed, values;
  keys_transposed.assign(static_cast<size_t>(heads * dh * tokens_padded), 0.0f);
  values.resize(static_cast<size_t>(d * tokens));
  float* kt_all = keys_transposed.data();
  float* v_all = values.data();
  context.run(static_cast<size_t>(heads), [&](size_t head) {
    const int64_t h = static_cast<int64_t>(head);
    float* kt = kt_all + h * dh * tokens_padded;
    float* v = v_all + h * tokens * dh;
    const float* k = qkv + d + h * dh;
    for (int64_t j = 0; j < tokens; ++j) {
      float* panel = kt + (j / kKeyTile) * kKeyTile * dh + j % kKeyTile;
      for (int64_t c = 0; c < dh; ++c) panel[c * kKeyTile] = k[j * 3 * d + c];
      std::copy(k + j * 3 * d + d, k + j * 3 * d + d + dh, v + j * dh);
    }
  });
  const int64_t blocks = (tokens + kQueryBlock - 1) / kQueryBlock;
  context.run(static_cast<size_t>(heads * blocks), [&](size_t task) {
    const int64_t head = static_cast<int64_t>(task) / blocks;
    const int64_t first = static_cast<int64_t>(task) % blocks * kQueryBlock;
    thread_local std::vector<float> scores;
    Block b;
    b.ld_qkv = 3 * d;
    b.rows = std::min(kQueryBlock, tokens - first);
    b.tokens = tokens;
    b.dh = dh;
    b.q = qkv + first * b.ld_qkv + head * dh;
    b.kt = kt_all + head * dh * tokens_padded;
    b.v = v_all + head * tokens * dh;
    b.ld_scores = tokens_padded;
    scores.resize(static_cast<size_t>(b.rows * tokens_padded));
    b.scores = scores.data();
    b.out = ctx + first * d + head * dh;
    b.ld_out = d;
#if NPUFLOW_HAVE_AVX2_KERNELS
    if (wide)
      attention_tiles::scores_avx512(b);
    else if (vectorized)
      scores_avx2(b);
    else
      scores_portable(b);
#else
    scores_portable(b);
#endif
    for (int64_t r = 0; r < b.rows; ++r) {
      const int64_t i = first + r;
      const float* row_bias =
          bias.data ? bias.data + head * bias.head_stride + i * bias.row_stride : nullptr;
      int64_t col_stride = bias.col_stride;
      float row_scale = scale;
      float* s = b.scores + r * b.ld_scores;
      if (bias.relative.present()) {
        // The scaled (and densely biased) scores take the row term here, and the softmax adds the
        // column term as its bias at scale 1 (exact): ((scale q.k + data) + row) + col.
        row_bias = add_relative_row_term(bias, head, i, tokens, scale, s);
        col_stride = 1;
        row_scale = 1.0f;
      }
#if NPUFLOW_HAVE_AVX2_KERNELS
      if (vectorized) {
        softmax_row_avx2(s, tokens, row_scale, row_bias, col_stride, nan_to_zero);
        continue;
      }
#endif
      softmax_row_portable(s, tokens, row_scale, row_bias, col_stride, nan_to_zero);
    }
#if NPUFLOW_HAVE_AVX2_KERNELS
    if (wide)
      attention_tiles::context_avx512(b);
    else if (vectorized)
      context_avx2(b);
    else
      context_portable(b);
#else
    context_portable(b);
#endif
  });
  (void)vectorized;
  (void)wide;
}

void host_attention_reference(const float* qkv, const AttentionShape& shape, float scale,
                              const AttentionBias& bias, bool nan_to_zero, float* ctx) {
  const int64_t tokens = shape.tokens, d = shape.hidden, dh = d / shape.heads;
  const int64_t stride = 3 * d;
  std::vector<double> scores(static_cast<size_t>(tokens));
  for (int64_t head = 0; head < shape.heads; ++head) {
    const int64_t off = head * dh;
    for (int64_t i = 0; i < tokens; ++i) {
      const float* q = qkv + i * stride + off;
      const float* row_bias =
          bias.data ? bias.data + head * bias.head_stride + i * bias.row_stride : nullptr;
      double mx = -INFINITY;
      for (int64_t j = 0; j < tokens; ++j) {
        const float* k = qkv + j * stride + d + off;
        double dot = 0;
        for (int64_t c = 0; c < dh; ++c) dot += static_cast<double>(q[c]) * k[c];
        double score = row_bias ? dot * scale + row_bias[j * bias.col_stride] : dot * scale;
        if (const RelativeAttentionBias& rel = bias.relative; rel.present()) {
          score +=
              static_cast<double>(rel.rows[(head * tokens + i) * rel.grid_h + j / rel.grid_w]) +
              rel.cols[(head * tokens + i) * rel.grid_w + j % rel.grid_w];
        }
        scores[static_cast<size_t>(j)] = score;
        mx = std::max(mx, scores[static_cast<size_t>(j)]);
      }
      double sum = 0;
      for (double& s : scores) {
        s = std::exp(s - mx);
        sum += s;
      }
      float* out = ctx + i * d + off;
      for (int64_t c = 0; c < dh; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < tokens; ++j) {
          double p = scores[static_cast<size_t>(j)] / sum;
          if (nan_to_zero && std::isnan(p)) p = 0.0;
          acc += p * qkv[j * stride + 2 * d + off + c];
        }
        out[c] = static_cast<float>(acc);
      }
    }
  }
}

}  // namespace npuflow
