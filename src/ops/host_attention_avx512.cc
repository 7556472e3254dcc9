#include "ops/host_attention_tiles.h"
#include "ops/simd.h"

#if NPUFLOW_HAVE_AVX2_KERNELS
#include <immintrin.h>

#include <algorithm>

namespace npuflow::attention_tiles {
namespace {

// s[r][j0 .. j0 + 16 P) for R query rows: q broadcast, P panels of 16 keys loaded as one vector
// each per head dim. 8 rows x 2 panels keeps 16 accumulators in the 32 registers.
template <int R, int P>
NPUFLOW_TARGET_AVX512 inline void scores_tile(const Block& b, int64_t r0, int64_t j0) {
  __m512 acc[R][P];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  const float* q = b.q + r0 * b.ld_qkv;
  const float* panel = b.kt + j0 * b.dh;
  for (int64_t c = 0; c < b.dh; ++c) {
    __m512 k[P];
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) k[p] = _mm512_loadu_ps(panel + p * kKeyTile * b.dh + c * kKeyTile);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 qv = _mm512_set1_ps(q[r * b.ld_qkv + c]);
#pragma GCC unroll 16
      for (int p = 0; p < P; ++p) acc[r][p] = _mm512_fmadd_ps(qv, k[p], acc[r][p]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p)
      _mm512_storeu_ps(b.scores + (r0 + r) * b.ld_scores + j0 + p * kKeyTile, acc[r][p]);
}

template <int P>
NPUFLOW_TARGET_AVX512 void scores_panels(const Block& b, int64_t j0) {
  int64_t r0 = 0;
  for (; r0 + 8 <= b.rows; r0 += 8) scores_tile<8, P>(b, r0, j0);
  if (b.rows - r0 >= 4) {
    scores_tile<4, P>(b, r0, j0);
    r0 += 4;
  }
  if (b.rows - r0 >= 2) {
    scores_tile<2, P>(b, r0, j0);
    r0 += 2;
  }
  if (b.rows - r0 == 1) scores_tile<1, P>(b, r0, j0);
}

// Keys per pass of the context tiles: a chunk of V (128 x dh floats, 32 KiB at dh 64) stays in
// L1 while every row group of the block reads it; a whole head's V (T x dh) does not stay in L2
// at a thousand tokens, and streaming it from L3 once per row group bounded the kernel.
constexpr int64_t kKeyChunk = 128;

// out[r][c0 .. c0 + 16 W) += sum_{j0 <= j < j1} p[r][j] v[j][c0 ..] for R rows (j0 == 0 starts
// from zero, later chunks resume from what the earlier ones stored: each output is still one
// chain of fused multiply-adds over j in order); the last vector takes the lanes of `last` only
// (a head dim that is not a multiple of 16).
template <int R, int W>
NPUFLOW_TARGET_AVX512 inline void context_tile(const Block& b, int64_t r0, int64_t c0,
                                               __mmask16 last, int64_t j0, int64_t j1) {
  __m512 acc[R][W];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const float* out = b.out + (r0 + r) * b.ld_out + c0;
#pragma GCC unroll 16
    for (int w = 0; w < W; ++w) {
      const __mmask16 lanes = w + 1 < W ? __mmask16{0xffff} : last;
      acc[r][w] = j0 == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(lanes, out + 16 * w);
    }
  }
  const float* p = b.scores + r0 * b.ld_scores;
  for (int64_t j = j0; j < j1; ++j) {
    const float* row = b.v + j * b.dh + c0;
    __m512 v[W];
#pragma GCC unroll 16
    for (int w = 0; w + 1 < W; ++w) v[w] = _mm512_loadu_ps(row + 16 * w);
    v[W - 1] = _mm512_maskz_loadu_ps(last, row + 16 * (W - 1));
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 pv = _mm512_set1_ps(p[r * b.ld_scores + j]);
#pragma GCC unroll 16
      for (int w = 0; w < W; ++w) acc[r][w] = _mm512_fmadd_ps(pv, v[w], acc[r][w]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    float* out = b.out + (r0 + r) * b.ld_out + c0;
#pragma GCC unroll 16
    for (int w = 0; w + 1 < W; ++w) _mm512_storeu_ps(out + 16 * w, acc[r][w]);
    _mm512_mask_storeu_ps(out + 16 * (W - 1), last, acc[r][W - 1]);
  }
}

template <int R>
NPUFLOW_TARGET_AVX512 void context_rows(const Block& b, int64_t r0, int64_t j0, int64_t j1) {
  for (int64_t c0 = 0; c0 < b.dh; c0 += 64) {
    const int64_t columns = std::min<int64_t>(64, b.dh - c0);
    const auto last = static_cast<__mmask16>(columns % 16 ? (1u << (columns % 16)) - 1 : 0xffffu);
    switch ((columns + 15) / 16) {
      case 4:
        context_tile<R, 4>(b, r0, c0, last, j0, j1);
        break;
      case 3:
        context_tile<R, 3>(b, r0, c0, last, j0, j1);
        break;
      case 2:
        context_tile<R, 2>(b, r0, c0, last, j0, j1);
        break;
      default:
        context_tile<R, 1>(b, r0, c0, last, j0, j1);
        break;
    }
  }
}

}  // namespace

NPUFLOW_TARGET_AVX512 void scores_avx512(const Block& b) {
  // Two panels at a time (32 keys), the rows inner: the panels stay in L1 for the block's rows.
  int64_t j0 = 0;
  for (; j0 + 2 * kKeyTile <= b.ld_scores; j0 += 2 * kKeyTile) scores_panels<2>(b, j0);
  if (j0 < b.ld_scores) scores_panels<1>(b, j0);
}

NPUFLOW_TARGET_AVX512 void context_avx512(const Block& b) {
  for (int64_t j0 = 0; j0 < b.tokens; j0 += kKeyChunk) {
    const int64_t j1 = std::min(b.tokens, j0 + kKeyChunk);
    int64_t r0 = 0;
    for (; r0 + 4 <= b.rows; r0 += 4) context_rows<4>(b, r0, j0, j1);
    if (b.rows - r0 >= 2) {
      context_rows<2>(b, r0, j0, j1);
      r0 += 2;
    }
    if (b.rows - r0 == 1) context_rows<1>(b, r0, j0, j1);
  }
}

}  // namespace npuflow::attention_tiles

#endif  // NPUFLOW_HAVE_AVX2_KERNELS
