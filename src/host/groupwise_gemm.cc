#include "host/groupwise_gemm.h"

#include <algorithm>
#include <cstring>

#include "core/scratch.h"
#include "host/groupwise_panel.h"
#include "ops/simd.h"

#if NPUFLOW_HAVE_AVX2_KERNELS
#include <immintrin.h>
#endif

namespace npuflow {
namespace {

using namespace groupwise;

int64_t padded_columns(int64_t n) {
  return (n + kColumnBlock - 1) / kColumnBlock * kColumnBlock;
}

WeightPanel whole(const HostGroupwiseWeight& w, const float* scales_gn) {
  return {w.k(),     w.padded_n(), w.n(),         w.group(),       w.padded_n(), w.code_bits(),
          w.pairs(), w.nibbles(),  w.high_bits(), w.code_values(), scales_gn};
}

// The portable loops: the same arithmetic, the same order of fp32 operations.
void block_portable(const RowBlock& block, const WeightPanel& w, float* c, int64_t ldc) {
  const int64_t k = w.k, np = w.np, group = w.group, groups = k / group;
  int32_t partial[kColumnBlock];
  for (int64_t r = 0; r < block.rows; ++r) {
    const int16_t* a = block.a16 + r * k;
    for (int64_t j0 = 0; j0 < np; j0 += kColumnBlock) {
      float out[kColumnBlock] = {};
      for (int64_t g = 0; g < groups; ++g) {
        std::fill(partial, partial + kColumnBlock, 0);
        for (int64_t kk = g * group; kk < (g + 1) * group; kk += 2) {
          if (w.code_bits != 8) {
            for (int64_t j = 0; j < kColumnBlock; ++j) {
              const auto [low, high] = code_pair_values(w, kk, j0, j);
              partial[j] += a[kk] * low + a[kk + 1] * high;
            }
            continue;
          }
          const int8_t* pair = pair_at(w, kk, j0);
          for (int64_t j = 0; j < kColumnBlock; ++j) {
            partial[j] += a[kk] * pair[2 * j] + a[kk + 1] * pair[2 * j + 1];
          }
        }
        const float a_scale = block.a_scales[r * groups + g];
        for (int64_t j = 0; j < kColumnBlock; ++j) {
          const float scale = a_scale * w.scales_gn[g * w.scale_stride + j0 + j];
          out[j] = out[j] + scale * static_cast<float>(partial[j]);
        }
      }
      const int64_t valid = std::min(kColumnBlock, w.cols - j0);
      std::copy(out, out + valid, c + r * ldc + j0);
    }
  }
}

#if NPUFLOW_HAVE_AVX2_KERNELS
// Eight bits, one per column, as the low 8 bytes of a byte mask (0xff where set).
NPUFLOW_TARGET_AVX2 inline __m128i bits_as_bytes(uint32_t bits) {
  const __m128i select = _mm_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
  const __m128i spread = _mm_set1_epi8(static_cast<char>(bits & 0xff));
  return _mm_cmpeq_epi8(_mm_and_si128(spread, select), select);
}

// Sixteen codes' values (bytes) from `tables`, the weight's code values 16 to a vpshufb table:
// the code's low 4 bits index each table, and its bits 4 and 5 (one per column in `bit4`, `bit5`)
// choose among them.
template <int kCodeBits>
NPUFLOW_TARGET_AVX2 inline __m128i look_up_codes(__m128i codes, const __m128i* tables,
                                                 uint32_t bit4, uint32_t bit5) {
  __m128i value = _mm_shuffle_epi8(tables[0], codes);
  if constexpr (kCodeBits >= 5) {
    const __m128i has4 = bits_as_bytes(bit4);
    value = _mm_blendv_epi8(value, _mm_shuffle_epi8(tables[1], codes), has4);
    if constexpr (kCodeBits == 6) {
      const __m128i upper = _mm_blendv_epi8(_mm_shuffle_epi8(tables[2], codes),
                                            _mm_shuffle_epi8(tables[3], codes), has4);
      value = _mm_blendv_epi8(value, upper, bits_as_bytes(bit5));
    }
  }
  return value;
}

// Eight bytes of code pairs (8 columns) as the int16 pairs of those columns: each int32 lane
// holds the low nibble's value in its low half and the high nibble's in its high half. `low4`,
// `low5` / `high4`, `high5`: the 8 columns' bits 4 and 5 at the pair's first / second K step.
template <int kCodeBits>
NPUFLOW_TARGET_AVX2 inline __m256i widen_code_pairs(const uint8_t* bytes, const __m128i* tables,
                                                    uint32_t low4, uint32_t high4, uint32_t low5,
                                                    uint32_t high5) {
  const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes));
  const __m128i mask = _mm_set1_epi8(0x0f);
  const __m128i low = look_up_codes<kCodeBits>(_mm_and_si128(v, mask), tables, low4, low5);
  const __m128i high =
      look_up_codes<kCodeBits>(_mm_and_si128(_mm_srli_epi16(v, 4), mask), tables, high4, high5);
  return _mm256_or_si256(_mm256_and_si256(_mm256_cvtepi8_epi32(low), _mm256_set1_epi32(0xffff)),
                         _mm256_slli_epi32(_mm256_cvtepi8_epi32(high), 16));
}

// The code values, 16 to a vpshufb table.
NPUFLOW_TARGET_AVX2 inline void load_byte_tables(const WeightPanel& w, __m128i* tables) {
  for (int t = 0; t < 4; ++t) {
    tables[t] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.code_values + 16 * t));
  }
}

// The K pair at kk of the 16 columns at j0 as int16 pairs, columns 0-7 in w0 and 8-15 in w1.
template <int kCodeBits>
NPUFLOW_TARGET_AVX2 inline void load_pairs_avx2(const WeightPanel& w, int64_t kk, int64_t j0,
                                                const __m128i* tables, __m256i& w0, __m256i& w1) {
  if constexpr (kCodeBits != 8) {
    const uint8_t* pair = nibble_pair_at(w, kk, j0);
    uint32_t bit4 = 0, bit5 = 0;
    if constexpr (kCodeBits >= 5) bit4 = high_bits_at(w, kk, j0)[0];
    if constexpr (kCodeBits == 6) bit5 = high_bits_at(w, kk, j0)[1];
    w0 = widen_code_pairs<kCodeBits>(pair, tables, bit4, bit4 >> 16, bit5, bit5 >> 16);
    w1 =
        widen_code_pairs<kCodeBits>(pair + 8, tables, bit4 >> 8, bit4 >> 24, bit5 >> 8, bit5 >> 24);
  } else {
    const int8_t* pair = pair_at(w, kk, j0);
    w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pair)));
    w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pair + 16)));
  }
}

template <int kCodeBits>
NPUFLOW_TARGET_AVX2 void block_avx2_rows(const RowBlock& block, const WeightPanel& w, float* c,
                                         int64_t ldc);

NPUFLOW_TARGET_AVX2 void block_avx2(const RowBlock& block, const WeightPanel& w, float* c,
                                    int64_t ldc) {
  const int64_t k = w.k, groups = k / w.group;
  // Four rows at a time: their eight accumulators and the weight pair fill the 16 registers.
  constexpr int64_t kRows = 4;
  for (int64_t first = 0; first < block.rows; first += kRows) {
    const RowBlock part{block.a16 + first * k, block.a_scales + first * groups,
                        std::min(kRows, block.rows - first)};
    switch (w.code_bits) {
      case 4:
        block_avx2_rows<4>(part, w, c + first * ldc, ldc);
        break;
      case 5:
        block_avx2_rows<5>(part, w, c + first * ldc, ldc);
        break;
      case 6:
        block_avx2_rows<6>(part, w, c + first * ldc, ldc);
        break;
      default:
        block_avx2_rows<8>(part, w, c + first * ldc, ldc);
    }
  }
}

template <int kCodeBits>
NPUFLOW_TARGET_AVX2 void block_avx2_rows(const RowBlock& block, const WeightPanel& w, float* c,
                                         int64_t ldc) {
  const int64_t k = w.k, np = w.np, group = w.group, groups = k / group;
  constexpr int64_t kRows = 4;
  const int64_t rows = block.rows;
  __m128i tables[4];
  load_byte_tables(w, tables);
  alignas(32) float out[kRows][kColumnBlock];
  for (int64_t j0 = 0; j0 < np; j0 += kColumnBlock) {
    std::memset(out, 0, sizeof(out));
    for (int64_t g = 0; g < groups; ++g) {
      __m256i acc[kRows][2];
      for (int64_t r = 0; r < kRows; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
      for (int64_t kk = g * group; kk < (g + 1) * group; kk += 2) {
        __m256i w0, w1;
        load_pairs_avx2<kCodeBits>(w, kk, j0, tables, w0, w1);
        for (int64_t r = 0; r < kRows; ++r) {
          int32_t a_pair;
          std::memcpy(&a_pair, block.a16 + r * k + kk, sizeof(a_pair));
          const __m256i a = _mm256_set1_epi32(a_pair);
          acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(w0, a));
          acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(w1, a));
        }
      }
      const __m256 ws0 = _mm256_loadu_ps(w.scales_gn + g * w.scale_stride + j0);
      const __m256 ws1 = _mm256_loadu_ps(w.scales_gn + g * w.scale_stride + j0 + 8);
      for (int64_t r = 0; r < kRows; ++r) {
        const __m256 a_scale = _mm256_set1_ps(block.a_scales[r * groups + g]);
        // Product, then sum: two roundings, as the portable loop (the file has no contraction).
        const __m256 p0 = _mm256_mul_ps(_mm256_mul_ps(a_scale, ws0), _mm256_cvtepi32_ps(acc[r][0]));
        const __m256 p1 = _mm256_mul_ps(_mm256_mul_ps(a_scale, ws1), _mm256_cvtepi32_ps(acc[r][1]));
        _mm256_store_ps(out[r], _mm256_add_ps(_mm256_load_ps(out[r]), p0));
        _mm256_store_ps(out[r] + 8, _mm256_add_ps(_mm256_load_ps(out[r] + 8), p1));
      }
    }
    const int64_t valid = std::min(kColumnBlock, w.cols - j0);
    for (int64_t r = 0; r < rows; ++r) std::copy(out[r], out[r] + valid, c + r * ldc + j0);
  }
}

template <int kCodeBits>
NPUFLOW_TARGET_AVX2 void decode_avx2(const WeightPanel& coded, int64_t j_begin, int64_t blocks,
                                     int8_t* out) {
  __m128i tables[4];
  load_byte_tables(coded, tables);
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t kk = 0; kk < coded.k; kk += 2) {
      __m256i w0, w1;
      load_pairs_avx2<kCodeBits>(coded, kk, j_begin + b * kColumnBlock, tables, w0, w1);
      // Back to bytes: packs interleaves the two registers' 128-bit halves, the permute puts
      // columns 0-7 before 8-15.
      const __m256i bytes = _mm256_permute4x64_epi64(_mm256_packs_epi16(w0, w1), 0xd8);
      _mm256_storeu_si256(
          reinterpret_cast<__m256i*>(out + pair_offset(coded.k, kk, b * kColumnBlock)), bytes);
    }
  }
}
#endif

bool cpu_runs(GroupwiseKernel kernel) {
#if NPUFLOW_HAVE_AVX2_KERNELS
  switch (kernel) {
    case GroupwiseKernel::kAvx2:
      return __builtin_cpu_supports("avx2") != 0;
    case GroupwiseKernel::kAvx512Vnni:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vnni");
    default:
      return true;
  }
#else
  return kernel == GroupwiseKernel::kPortable || kernel == GroupwiseKernel::kAuto;
#endif
}

GroupwiseKernel resolve(GroupwiseKernel kernel) {
  if (kernel != GroupwiseKernel::kAuto && cpu_runs(kernel)) return kernel;
  // The host ops' switch (tests, host_kernels=portable) turns every vector kernel off.
  if (!avx2_kernels_active()) return GroupwiseKernel::kPortable;
  if (cpu_runs(GroupwiseKernel::kAvx512Vnni)) return GroupwiseKernel::kAvx512Vnni;
  return cpu_runs(GroupwiseKernel::kAvx2) ? GroupwiseKernel::kAvx2 : GroupwiseKernel::kPortable;
}

}  // namespace

const char* groupwise_kernel_name(GroupwiseKernel kernel) {
  switch (kernel) {
    case GroupwiseKernel::kAuto:
      return "auto";
    case GroupwiseKernel::kPortable:
      return "portable";
    case GroupwiseKernel::kAvx2:
      return "avx2";
    case GroupwiseKernel::kAvx512Vnni:
      return "avx512-vnni";
  }
  return "?";
}

std::vector<GroupwiseKernel> groupwise_kernels_available() {
  std::vector<GroupwiseKernel> kernels;
  for (GroupwiseKernel kernel :
       {GroupwiseKernel::kPortable, GroupwiseKernel::kAvx2, GroupwiseKernel::kAvx512Vnni}) {
    if (cpu_runs(kernel)) kernels.push_back(kernel);
  }
  return kernels;
}

HostGroupwiseWeight::HostGroupwiseWeight(const int8_t* weight, int64_t k, int64_t n,
                                         ElementType type, int64_t group)
    : PackedWeight(k, n, type, group), np_(padded_columns(n)) {
  // The distinct values, ascending; with at most 64 (0 among them: the padding columns), each
  // value is stored as its index among them, in 4 bits where 16 suffice, else 5 or 6.
  std::array<bool, 256> present{};
  present[128] = true;
  for (int64_t i = 0; i < k * n; ++i) present[static_cast<size_t>(weight[i] + 128)] = true;
  const auto distinct = std::count(present.begin(), present.end(), true);
  if (distinct <= 64) {
    std::array<uint8_t, 256> code_of{};
    int codes = 0;
    for (int v = 0; v < 256; ++v) {
      if (!present[static_cast<size_t>(v)]) continue;
      code_of[static_cast<size_t>(v)] = static_cast<uint8_t>(codes);
      code_values_[static_cast<size_t>(codes++)] = static_cast<int8_t>(v - 128);
    }
    high_planes_ = distinct > 32 ? 2 : distinct > 16 ? 1 : 0;
    nibbles_.assign(static_cast<size_t>(k / 2 * np_), 0);
    high_bits_.assign(static_cast<size_t>(np_ / kColumnBlock * (k / 2) * high_planes_), 0);
    for (int64_t kk = 0; kk < k; ++kk) {
      const int shift = (kk & 1) * 4;
      for (int64_t col = 0; col < np_; ++col) {
        const int value = col < n ? weight[kk * n + col] : 0;
        const uint8_t code = code_of[static_cast<size_t>(value + 128)];
        const int64_t block = col / kColumnBlock, lane = col % kColumnBlock;
        nibbles_[static_cast<size_t>(block * (k / 2 * kColumnBlock) + (kk / 2) * kColumnBlock +
                                     lane)] |= static_cast<uint8_t>((code & 0x0f) << shift);
        for (int plane = 0; plane < high_planes_; ++plane) {
          if (!((code >> (4 + plane)) & 1)) continue;
          high_bits_[static_cast<size_t>((block * (k / 2) + kk / 2) * high_planes_ + plane)] |=
              1u << (lane + (kk & 1) * 16);
        }
      }
    }
    return;
  }
  pairs_.assign(static_cast<size_t>(k * np_), 0);
  for (int64_t kk = 0; kk < k; ++kk) {
    for (int64_t col = 0; col < n; ++col) {
      const int64_t at = (col / kColumnBlock) * (k * kColumnBlock) + (kk / 2) * 2 * kColumnBlock +
                         (col % kColumnBlock) * 2 + (kk & 1);
      pairs_[static_cast<size_t>(at)] = weight[kk * n + col];
    }
  }
}

namespace {

// One row block against one panel, on `chosen`'s kernel.
void run_block([[maybe_unused]] GroupwiseKernel chosen, const RowBlock& block, const WeightPanel& w,
               float* c, int64_t ldc) {
#if NPUFLOW_HAVE_AVX2_KERNELS
  if (chosen == GroupwiseKernel::kAvx512Vnni) return block_avx512_vnni(block, w, c, ldc);
  if (chosen == GroupwiseKernel::kAvx2) return block_avx2(block, w, c, ldc);
#endif
  block_portable(block, w, c, ldc);
}

// The columns [j_begin, j_begin + 16 * blocks) of a coded weight decoded into int8 pairs, laid out
// as a panel of their own (`out`: K x 16 * blocks bytes).
void decode_columns([[maybe_unused]] GroupwiseKernel chosen, const WeightPanel& coded,
                    int64_t j_begin, int64_t blocks, int8_t* out) {
#if NPUFLOW_HAVE_AVX2_KERNELS
  if (chosen == GroupwiseKernel::kAvx512Vnni) {
    return decode_avx512_vnni(coded, j_begin, blocks, out);
  }
  if (chosen == GroupwiseKernel::kAvx2) {
    switch (coded.code_bits) {
      case 4:
        return decode_avx2<4>(coded, j_begin, blocks, out);
      case 5:
        return decode_avx2<5>(coded, j_begin, blocks, out);
      default:
        return decode_avx2<6>(coded, j_begin, blocks, out);
    }
  }
#endif
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t kk = 0; kk < coded.k; kk += 2) {
      int8_t* pair = out + pair_offset(coded.k, kk, b * kColumnBlock);
      for (int64_t j = 0; j < kColumnBlock; ++j) {
        const auto [low, high] = code_pair_values(coded, kk, j_begin + b * kColumnBlock, j);
        pair[2 * j] = low;
        pair[2 * j + 1] = high;
      }
    }
  }
}

// Rows [row0, row0 + rows) of the activation widened to int16 into a row block's kRowBlock x K
// (zero rows after them) and their scales into its kRowBlock x G (zero scales after).
void fill_row_block(const int8_t* a, const float* a_scales, int64_t row0, int64_t rows, int64_t k,
                    int64_t groups, int16_t* a16, float* scales) {
  for (int64_t i = 0; i < rows * k; ++i) a16[i] = a[row0 * k + i];
  std::fill(a16 + rows * k, a16 + kRowBlock * k, int16_t{0});
  std::copy(a_scales + row0 * groups, a_scales + (row0 + rows) * groups, scales);
  std::fill(scales + rows * groups, scales + kRowBlock * groups, 0.0f);
}

// The same rows as int8 values into a byte row block, with their sums per group.
void fill_byte_rows(const int8_t* a, const float* a_scales, int64_t row0, int64_t rows, int64_t k,
                    int64_t group, int8_t* a8, int32_t* sums, float* scales) {
  const int64_t groups = k / group;
  std::copy(a + row0 * k, a + (row0 + rows) * k, a8);
  std::fill(a8 + rows * k, a8 + kRowBlock * k, int8_t{0});
  for (int64_t i = 0; i < kRowBlock * groups; ++i) {
    int32_t sum = 0;
    for (int64_t kk = i * group; kk < (i + 1) * group; ++kk) sum += a8[kk];
    sums[i] = sum;
  }
  std::copy(a_scales + row0 * groups, a_scales + (row0 + rows) * groups, scales);
  std::fill(scales + rows * groups, scales + kRowBlock * groups, 0.0f);
}

}  // namespace

void host_groupwise_gemm(const int8_t* a, const float* a_scales, int64_t m,
                         const HostGroupwiseWeight& w, const float* w_scales, float* c,
                         const ExecContext& context, GroupwiseKernel kernel) {
  const int64_t k = w.k(), n = w.n(), np = w.padded_n(), groups = k / w.group();
  // The weight scales, G x Np (zero for padded columns), so a vector reads 8 columns' scales.
  std::vector<float> scales_gn(static_cast<size_t>(groups * np), 0.0f);
  for (int64_t col = 0; col < n; ++col) {
    for (int64_t g = 0; g < groups; ++g) scales_gn[g * np + col] = w_scales[col * groups + g];
  }
  const GroupwiseKernel chosen = resolve(kernel);
  const WeightPanel stored = whole(w, scales_gn.data());
  const int64_t blocks = (m + kRowBlock - 1) / kRowBlock;
  // With several row blocks, each panel of columns is prepared once and every row block runs on
  // it: codes decoded into int8 pairs (read in the kernel, they would be decoded once per row
  // block), and on AVX-512 VNNI, where each group holds whole quads, any weight rewritten as biased
  // quads for vpdpbusd.
  const bool quads = chosen == GroupwiseKernel::kAvx512Vnni && w.group() % 4 == 0;
  if (blocks == 1 || (w.code_bits() == 8 && !quads)) {
    // Row blocks in parallel, each reading the weight as stored.
    context.run(static_cast<size_t>(blocks), [&](size_t index) {
      const int64_t row0 = static_cast<int64_t>(index) * kRowBlock;
      thread_local std::vector<int16_t> a16_buffer;
      thread_local std::vector<float> scale_buffer;
      int16_t* a16 = sized(a16_buffer, static_cast<size_t>(kRowBlock * k));
      float* scales = sized(scale_buffer, static_cast<size_t>(kRowBlock * groups));
      const int64_t rows = std::min(kRowBlock, m - row0);
      fill_row_block(a, a_scales, row0, rows, k, groups, a16, scales);
      run_block(chosen, {a16, scales, rows}, stored, c + row0 * n, n);
    });
    return;
  }
  const size_t padded_rows = static_cast<size_t>(blocks * kRowBlock);
  std::vector<float> scales(padded_rows * static_cast<size_t>(groups));
  std::vector<int16_t> a16(quads ? 0 : padded_rows * static_cast<size_t>(k));
  std::vector<int8_t> a8(quads ? padded_rows * static_cast<size_t>(k) : 0);
  std::vector<int32_t> sums(quads ? padded_rows * static_cast<size_t>(groups) : 0);
  context.run(static_cast<size_t>(blocks), [&](size_t index) {
    const int64_t row0 = static_cast<int64_t>(index) * kRowBlock;
    const int64_t rows = std::min(kRowBlock, m - row0);
    if (quads) {
      fill_byte_rows(a, a_scales, row0, rows, k, w.group(), a8.data() + row0 * k,
                     sums.data() + row0 * groups, scales.data() + row0 * groups);
    } else {
      fill_row_block(a, a_scales, row0, rows, k, groups, a16.data() + row0 * k,
                     scales.data() + row0 * groups);
    }
  });
  const int64_t column_blocks = np / kColumnBlock;
  // 64 columns per panel (K x 64 bytes decoded) where that still leaves tasks for every thread.
  const int64_t per_panel = column_blocks >= 16 ? 4 : 1;
  const int64_t panels = (column_blocks + per_panel - 1) / per_panel;
  context.run(static_cast<size_t>(panels), [&](size_t index) {
    const int64_t first = static_cast<int64_t>(index) * per_panel;
    const int64_t count = std::min(per_panel, column_blocks - first);
    const int64_t j_begin = first * kColumnBlock;
    WeightPanel panel = stored;
    panel.np = count * kColumnBlock;
    panel.cols = std::min(panel.np, n - j_begin);
    panel.scales_gn = scales_gn.data() + j_begin;
    if (w.code_bits() == 8) {
      panel.pairs = w.pairs() + pair_offset(k, 0, j_begin);
    } else {
      thread_local std::vector<int8_t> decoded_buffer;
      int8_t* decoded = sized(decoded_buffer, static_cast<size_t>(k * panel.np));
      decode_columns(chosen, stored, j_begin, count, decoded);
      panel.pairs = decoded;
    }
    panel.code_bits = 8;
#if NPUFLOW_HAVE_AVX2_KERNELS
    if (quads) {
      thread_local std::vector<uint8_t> quad_buffer;
      uint8_t* biased = sized(quad_buffer, static_cast<size_t>(k * panel.np));
      quads_avx512_vnni(panel, biased);
      panel.quads = biased;
      for (int64_t row0 = 0; row0 < m; row0 += kRowBlock) {
        const ByteRowBlock block{a8.data() + row0 * k, sums.data() + row0 * groups,
                                 scales.data() + row0 * groups, std::min(kRowBlock, m - row0)};
        block_avx512_vnni_quads(block, panel, c + row0 * n + j_begin, n);
      }
      return;
    }
#endif
    for (int64_t row0 = 0; row0 < m; row0 += kRowBlock) {
      const RowBlock block{a16.data() + row0 * k, scales.data() + row0 * groups,
                           std::min(kRowBlock, m - row0)};
      run_block(chosen, block, panel, c + row0 * n + j_begin, n);
    }
  });
}

}  // namespace npuflow
