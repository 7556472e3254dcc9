// The host group-wise GEMM's AVX-512 VNNI kernels (host/groupwise_panel.h): a K pair of 16
// columns per vpdpwssd, codes looked up in 32-bit lanes (vpermd, vpermt2d).
#include "host/groupwise_panel.h"
#include "ops/simd.h"

#if NPUFLOW_HAVE_AVX2_KERNELS
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#define NPUFLOW_TARGET_AVX512_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))

namespace npuflow::groupwise {
namespace {

// The code values as int32 lanes, 16 to a vector: vpermd looks a code up by an index's low 4
// bits, vpermt2d by its low 5 in two of them (bit 5 then picks the pair).
NPUFLOW_TARGET_AVX512_VNNI inline void load_lane_tables(const WeightPanel& w, __m512i* tables) {
  for (int t = 0; t < 4; ++t) {
    tables[t] = _mm512_maskz_cvtepi8_epi32(
        0xffff, _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.code_values + 16 * t)));
  }
}

// The K pair at kk of the 16 columns at j0 as 16 int16 pairs (the zero-masked forms: GCC 12 flags
// the plain ones' undefined pass-through vector).
template <int kCodeBits>
NPUFLOW_TARGET_AVX512_VNNI inline __m512i load_pairs_avx512(const WeightPanel& w, int64_t kk,
                                                            int64_t j0, const __m512i* tables) {
  constexpr __mmask16 kAll = 0xffff;
  if constexpr (kCodeBits == 8) {
    return _mm512_cvtepi8_epi16(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pair_at(w, kk, j0))));
  } else {
    // 16 bytes of code pairs, as widen_code_pairs does for 8.
    const __m512i v = _mm512_maskz_cvtepu8_epi32(
        kAll, _mm_loadu_si128(reinterpret_cast<const __m128i*>(nibble_pair_at(w, kk, j0))));
    __m512i low, high;
    if constexpr (kCodeBits >= 5) {
      // Each code's bit 4 (a mask bit per column) goes into its index; bit 5 picks between the
      // lookups in the first and the last 32 values.
      const uint32_t* planes = high_bits_at(w, kk, j0);
      const __m512i sixteen = _mm512_set1_epi32(16);
      __m512i low_codes = _mm512_and_si512(v, _mm512_set1_epi32(0x0f));
      __m512i high_codes = _mm512_maskz_srli_epi32(kAll, v, 4);
      low_codes =
          _mm512_mask_or_epi32(low_codes, static_cast<__mmask16>(planes[0]), low_codes, sixteen);
      high_codes = _mm512_mask_or_epi32(high_codes, static_cast<__mmask16>(planes[0] >> 16),
                                        high_codes, sixteen);
      low = _mm512_permutex2var_epi32(tables[0], low_codes, tables[1]);
      high = _mm512_permutex2var_epi32(tables[0], high_codes, tables[1]);
      if constexpr (kCodeBits == 6) {
        low = _mm512_mask_blend_epi32(static_cast<__mmask16>(planes[1]), low,
                                      _mm512_permutex2var_epi32(tables[2], low_codes, tables[3]));
        high = _mm512_mask_blend_epi32(static_cast<__mmask16>(planes[1] >> 16), high,
                                       _mm512_permutex2var_epi32(tables[2], high_codes, tables[3]));
      }
    } else {
      low = _mm512_maskz_permutexvar_epi32(kAll, v, tables[0]);
      high = _mm512_maskz_permutexvar_epi32(kAll, _mm512_maskz_srli_epi32(kAll, v, 4), tables[0]);
    }
    return _mm512_or_si512(_mm512_and_si512(low, _mm512_set1_epi32(0xffff)),
                           _mm512_maskz_slli_epi32(kAll, high, 16));
  }
}

// out += (a_scale * ws) * float(partial): a group's product then sum, two roundings.
NPUFLOW_TARGET_AVX512_VNNI inline void add_group(float* out, __m512i partial, float a_scale,
                                                 __m512 ws) {
  // The masked form: GCC 12 flags the plain one's undefined pass-through vector.
  const __m512 exact = _mm512_mask_cvtepi32_ps(_mm512_setzero_ps(), 0xffff, partial);
  const __m512 p = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(a_scale), ws), exact);
  _mm512_store_ps(out, _mm512_add_ps(_mm512_load_ps(out), p));
}

// The same loop on 512-bit vectors: one vpdpwssd takes a K pair of 16 columns and accumulates.
template <int kCodeBits>
NPUFLOW_TARGET_AVX512_VNNI void block_rows(const RowBlock& block, const WeightPanel& w, float* c,
                                           int64_t ldc) {
  const int64_t k = w.k, np = w.np, group = w.group, groups = k / group;
  const int64_t rows = block.rows;
  __m512i tables[4];
  load_lane_tables(w, tables);
  alignas(64) float out[kRowBlock][kColumnBlock];
  for (int64_t j0 = 0; j0 < np; j0 += kColumnBlock) {
    std::memset(out, 0, sizeof(out));
    for (int64_t g = 0; g < groups; ++g) {
      __m512i acc[kRowBlock];
      for (int64_t r = 0; r < kRowBlock; ++r) acc[r] = _mm512_setzero_si512();
      for (int64_t kk = g * group; kk < (g + 1) * group; kk += 2) {
        const __m512i wv = load_pairs_avx512<kCodeBits>(w, kk, j0, tables);
        for (int64_t r = 0; r < kRowBlock; ++r) {
          int32_t a_pair;
          std::memcpy(&a_pair, block.a16 + r * k + kk, sizeof(a_pair));
          acc[r] = _mm512_dpwssd_epi32(acc[r], wv, _mm512_set1_epi32(a_pair));
        }
      }
      const __m512 ws = _mm512_loadu_ps(w.scales_gn + g * w.scale_stride + j0);
      for (int64_t r = 0; r < kRowBlock; ++r) {
        add_group(out[r], acc[r], block.a_scales[r * groups + g], ws);
      }
    }
    const int64_t valid = std::min(kColumnBlock, w.cols - j0);
    for (int64_t r = 0; r < rows; ++r) std::copy(out[r], out[r] + valid, c + r * ldc + j0);
  }
}

// Codes decoded into int8 pairs, the columns [j_begin, j_begin + 16 * blocks) of `coded` as a
// panel of their own (`out`: K x 16 * blocks bytes, pair_at's layout).
template <int kCodeBits>
NPUFLOW_TARGET_AVX512_VNNI void decode_columns(const WeightPanel& coded, int64_t j_begin,
                                               int64_t blocks, int8_t* out) {
  __m512i tables[4];
  load_lane_tables(coded, tables);
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t kk = 0; kk < coded.k; kk += 2) {
      const __m512i wv =
          load_pairs_avx512<kCodeBits>(coded, kk, j_begin + b * kColumnBlock, tables);
      _mm256_storeu_si256(
          reinterpret_cast<__m256i*>(out + pair_offset(coded.k, kk, b * kColumnBlock)),
          _mm512_maskz_cvtepi16_epi8(0xffffffff, wv));
    }
  }
}

}  // namespace

NPUFLOW_TARGET_AVX512_VNNI void quads_avx512_vnni(const WeightPanel& pairs, uint8_t* out) {
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t j0 = 0; j0 < pairs.np; j0 += kColumnBlock) {
    for (int64_t kq = 0; kq < pairs.k; kq += 4) {
      // Two K pairs of 16 columns, interleaved by column: unpack takes columns 0-3 and 8-11 (lo),
      // 4-7 and 12-15 (hi) per 128-bit half; the permutes put them in column order.
      const __m256i p0 =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pair_at(pairs, kq, j0)));
      const __m256i p1 =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pair_at(pairs, kq + 2, j0)));
      const __m256i lo = _mm256_unpacklo_epi16(p0, p1), hi = _mm256_unpackhi_epi16(p0, p1);
      uint8_t* quad = out + (j0 / kColumnBlock) * (pairs.k * kColumnBlock) + kq * kColumnBlock;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(quad),
                          _mm256_xor_si256(_mm256_permute2x128_si256(lo, hi, 0x20), bias));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(quad + 32),
                          _mm256_xor_si256(_mm256_permute2x128_si256(lo, hi, 0x31), bias));
    }
  }
}

NPUFLOW_TARGET_AVX512_VNNI void block_avx512_vnni_quads(const ByteRowBlock& block,
                                                        const WeightPanel& w, float* c,
                                                        int64_t ldc) {
  const int64_t k = w.k, group = w.group, groups = k / group;
  alignas(64) float out[kRowBlock][kColumnBlock];
  for (int64_t j0 = 0; j0 < w.np; j0 += kColumnBlock) {
    std::memset(out, 0, sizeof(out));
    const uint8_t* panel = w.quads + (j0 / kColumnBlock) * (k * kColumnBlock);
    for (int64_t g = 0; g < groups; ++g) {
      __m512i acc[kRowBlock];
      for (int64_t r = 0; r < kRowBlock; ++r) acc[r] = _mm512_setzero_si512();
      for (int64_t kq = g * group; kq < (g + 1) * group; kq += 4) {
        const __m512i wv = _mm512_loadu_si512(panel + kq * kColumnBlock);
        for (int64_t r = 0; r < kRowBlock; ++r) {
          int32_t a_quad;
          std::memcpy(&a_quad, block.a8 + r * k + kq, sizeof(a_quad));
          acc[r] = _mm512_dpbusd_epi32(acc[r], wv, _mm512_set1_epi32(a_quad));
        }
      }
      const __m512 ws = _mm512_loadu_ps(w.scales_gn + g * w.scale_stride + j0);
      for (int64_t r = 0; r < kRowBlock; ++r) {
        // The group's exact int32 partial, as the pairs' kernels have it.
        const __m512i exact =
            _mm512_sub_epi32(acc[r], _mm512_set1_epi32(128 * block.sums[r * groups + g]));
        add_group(out[r], exact, block.a_scales[r * groups + g], ws);
      }
    }
    const int64_t valid = std::min(kColumnBlock, w.cols - j0);
    for (int64_t r = 0; r < block.rows; ++r) std::copy(out[r], out[r] + valid, c + r * ldc + j0);
  }
}

void block_avx512_vnni(const RowBlock& block, const WeightPanel& w, float* c, int64_t ldc) {
  switch (w.code_bits) {
    case 4:
      return block_rows<4>(block, w, c, ldc);
    case 5:
      return block_rows<5>(block, w, c, ldc);
    case 6:
      return block_rows<6>(block, w, c, ldc);
    default:
      return block_rows<8>(block, w, c, ldc);
  }
}

void decode_avx512_vnni(const WeightPanel& coded, int64_t j_begin, int64_t blocks, int8_t* out) {
  switch (coded.code_bits) {
    case 4:
      return decode_columns<4>(coded, j_begin, blocks, out);
    case 5:
      return decode_columns<5>(coded, j_begin, blocks, out);
    default:
      return decode_columns<6>(coded, j_begin, blocks, out);
  }
}

}  // namespace npuflow::groupwise
#endif
