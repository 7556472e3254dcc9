#include "host/groupwise_gemm.h"

#include <algorithm>
#include <cstring>

#include "core/scratch.h"
#include "ops/simd.h"

#if NPUFLOW_HAVE_AVX2_KERNELS
#include <immintrin.h>
#endif

namespace npuflow {
namespace {

constexpr int64_t kColumnBlock = 16;  // two AVX2 vectors of int32
constexpr int64_t kRowBlock = 8;      // rows sharing each weight load

// Where the K pair starting at `kk` of the column block starting at `j0` lies: each block of 16
// columns holds its K/2 pairs contiguously, 32 bytes apiece (16 as nibbles), so a kernel streams
// one block's whole K from consecutive cache lines.
const int8_t* pair_at(const HostGroupwiseWeight& w, int64_t kk, int64_t j0) {
  return w.pairs() + (j0 / kColumnBlock) * (w.k() * kColumnBlock) + (kk / 2) * 2 * kColumnBlock;
}
const uint8_t* nibble_pair_at(const HostGroupwiseWeight& w, int64_t kk, int64_t j0) {
  return w.nibbles() + (j0 / kColumnBlock) * (w.k() / 2 * kColumnBlock) + (kk / 2) * kColumnBlock;
}
// The fifth bits of that pair's 16 columns (5-bit codes): bit c at kk, bit 16 + c at kk + 1.
uint32_t fifth_bits_at(const HostGroupwiseWeight& w, int64_t kk, int64_t j0) {
  return w.fifth_bits()[(j0 / kColumnBlock) * (w.k() / 2) + kk / 2];
}

int64_t padded_columns(int64_t n) {
  return (n + kColumnBlock - 1) / kColumnBlock * kColumnBlock;
}

// One block of kRowBlock rows, of which the first `rows` are real (the vector kernels compute all
// of them; the rest are zeros with zero scales): each row's K values widened to int16 (two
// adjacent values read as one int32 are the pair a kernel broadcasts) and its G scales.
struct RowBlock {
  const int16_t* a16;     // kRowBlock x K
  const float* a_scales;  // kRowBlock x G
  int64_t rows;
};

// The portable loops: the same arithmetic, the same order of fp32 operations.
void block_portable(const RowBlock& block, const HostGroupwiseWeight& w, const float* scales_gn,
                    float* c, int64_t n) {
  const int64_t k = w.k(), np = w.padded_n(), group = w.group(), groups = k / group;
  int32_t partial[kColumnBlock];
  for (int64_t r = 0; r < block.rows; ++r) {
    const int16_t* a = block.a16 + r * k;
    for (int64_t j0 = 0; j0 < np; j0 += kColumnBlock) {
      float out[kColumnBlock] = {};
      for (int64_t g = 0; g < groups; ++g) {
        std::fill(partial, partial + kColumnBlock, 0);
        for (int64_t kk = g * group; kk < (g + 1) * group; kk += 2) {
          if (w.code_bits() != 8) {
            // A code pair byte: K step kk in the low nibble, kk + 1 in the high one; 5-bit codes
            // add their fifth bits.
            const uint8_t* pair = nibble_pair_at(w, kk, j0);
            const uint32_t fifth = w.code_bits() == 5 ? fifth_bits_at(w, kk, j0) : 0;
            const int8_t* value = w.code_values();
            for (int64_t j = 0; j < kColumnBlock; ++j) {
              const uint32_t low = (pair[j] & 0x0fu) | ((fifth >> j) & 1u) << 4;
              const uint32_t high = (pair[j] >> 4u) | ((fifth >> (16 + j)) & 1u) << 4;
              partial[j] += a[kk] * value[low] + a[kk + 1] * value[high];
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
          const float scale = a_scale * scales_gn[g * np + j0 + j];
          out[j] = out[j] + scale * static_cast<float>(partial[j]);
        }
      }
      const int64_t valid = std::min(kColumnBlock, n - j0);
      std::copy(out, out + valid, c + r * n + j0);
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

// Eight bytes of code pairs (8 columns) as the int16 pairs of those columns: each int32 lane
// holds the low nibble's value in its low half and the high nibble's in its high half. `table`:
// the weight's first 16 code values as bytes (a vpshufb table); with 5-bit codes, `table_high`
// holds the next 16, and `low_fifth` / `high_fifth` the 8 columns' fifth bits at the pair's first
// and second K step.
template <bool kFifthBits>
NPUFLOW_TARGET_AVX2 inline __m256i widen_code_pairs(const uint8_t* bytes, __m128i table,
                                                    __m128i table_high, uint32_t low_fifth,
                                                    uint32_t high_fifth) {
  const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes));
  const __m128i mask = _mm_set1_epi8(0x0f);
  const __m128i low_codes = _mm_and_si128(v, mask);
  const __m128i high_codes = _mm_and_si128(_mm_srli_epi16(v, 4), mask);
  __m128i low = _mm_shuffle_epi8(table, low_codes);
  __m128i high = _mm_shuffle_epi8(table, high_codes);
  if constexpr (kFifthBits) {
    low = _mm_blendv_epi8(low, _mm_shuffle_epi8(table_high, low_codes), bits_as_bytes(low_fifth));
    high =
        _mm_blendv_epi8(high, _mm_shuffle_epi8(table_high, high_codes), bits_as_bytes(high_fifth));
  }
  return _mm256_or_si256(_mm256_and_si256(_mm256_cvtepi8_epi32(low), _mm256_set1_epi32(0xffff)),
                         _mm256_slli_epi32(_mm256_cvtepi8_epi32(high), 16));
}

template <int kCodeBits>
NPUFLOW_TARGET_AVX2 void block_avx2_rows(const RowBlock& block, const HostGroupwiseWeight& w,
                                         const float* scales_gn, float* c, int64_t n);

NPUFLOW_TARGET_AVX2 void block_avx2(const RowBlock& block, const HostGroupwiseWeight& w,
                                    const float* scales_gn, float* c, int64_t n) {
  const int64_t k = w.k(), groups = k / w.group();
  // Four rows at a time: their eight accumulators and the weight pair fill the 16 registers.
  constexpr int64_t kRows = 4;
  for (int64_t first = 0; first < block.rows; first += kRows) {
    const RowBlock part{block.a16 + first * k, block.a_scales + first * groups,
                        std::min(kRows, block.rows - first)};
    switch (w.code_bits()) {
      case 4:
        block_avx2_rows<4>(part, w, scales_gn, c + first * n, n);
        break;
      case 5:
        block_avx2_rows<5>(part, w, scales_gn, c + first * n, n);
        break;
      default:
        block_avx2_rows<8>(part, w, scales_gn, c + first * n, n);
    }
  }
}

template <int kCodeBits>
NPUFLOW_TARGET_AVX2 void block_avx2_rows(const RowBlock& block, const HostGroupwiseWeight& w,
                                         const float* scales_gn, float* c, int64_t n) {
  const int64_t k = w.k(), np = w.padded_n(), group = w.group(), groups = k / group;
  constexpr int64_t kRows = 4;
  const int64_t rows = block.rows;
  const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.code_values()));
  const __m128i table_high =
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.code_values() + 16));
  alignas(32) float out[kRows][kColumnBlock];
  for (int64_t j0 = 0; j0 < np; j0 += kColumnBlock) {
    std::memset(out, 0, sizeof(out));
    for (int64_t g = 0; g < groups; ++g) {
      __m256i acc[kRows][2];
      for (int64_t r = 0; r < kRows; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
      for (int64_t kk = g * group; kk < (g + 1) * group; kk += 2) {
        __m256i w0, w1;
        if constexpr (kCodeBits != 8) {
          constexpr bool kFifth = kCodeBits == 5;
          const uint8_t* pair = nibble_pair_at(w, kk, j0);
          const uint32_t fifth = kFifth ? fifth_bits_at(w, kk, j0) : 0;
          w0 = widen_code_pairs<kFifth>(pair, table, table_high, fifth, fifth >> 16);
          w1 = widen_code_pairs<kFifth>(pair + 8, table, table_high, fifth >> 8, fifth >> 24);
        } else {
          const int8_t* pair = pair_at(w, kk, j0);
          w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pair)));
          w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pair + 16)));
        }
        for (int64_t r = 0; r < kRows; ++r) {
          int32_t a_pair;
          std::memcpy(&a_pair, block.a16 + r * k + kk, sizeof(a_pair));
          const __m256i a = _mm256_set1_epi32(a_pair);
          acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(w0, a));
          acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(w1, a));
        }
      }
      const __m256 ws0 = _mm256_loadu_ps(scales_gn + g * np + j0);
      const __m256 ws1 = _mm256_loadu_ps(scales_gn + g * np + j0 + 8);
      for (int64_t r = 0; r < kRows; ++r) {
        const __m256 a_scale = _mm256_set1_ps(block.a_scales[r * groups + g]);
        // Product, then sum: two roundings, as the portable loop (the file has no contraction).
        const __m256 p0 = _mm256_mul_ps(_mm256_mul_ps(a_scale, ws0), _mm256_cvtepi32_ps(acc[r][0]));
        const __m256 p1 = _mm256_mul_ps(_mm256_mul_ps(a_scale, ws1), _mm256_cvtepi32_ps(acc[r][1]));
        _mm256_store_ps(out[r], _mm256_add_ps(_mm256_load_ps(out[r]), p0));
        _mm256_store_ps(out[r] + 8, _mm256_add_ps(_mm256_load_ps(out[r] + 8), p1));
      }
    }
    const int64_t valid = std::min(kColumnBlock, n - j0);
    for (int64_t r = 0; r < rows; ++r) std::copy(out[r], out[r] + valid, c + r * n + j0);
  }
}

// The same loop on 512-bit vectors: one vpdpwssd takes a K pair of 16 columns and accumulates.
template <int kCodeBits>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void block_avx512_vnni(
    const RowBlock& block, const HostGroupwiseWeight& w, const float* scales_gn, float* c,
    int64_t n) {
  const int64_t k = w.k(), np = w.padded_n(), group = w.group(), groups = k / group;
  const int64_t rows = block.rows;
  // The code values as int32 lanes, 16 to a vector: vpermd looks a code up by an index's low 4
  // bits, vpermt2d a 5-bit code in both.
  constexpr __mmask16 kAll = 0xffff;
  const __m512i table = _mm512_maskz_cvtepi8_epi32(
      kAll, _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.code_values())));
  const __m512i table_high = _mm512_maskz_cvtepi8_epi32(
      kAll, _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.code_values() + 16)));
  alignas(64) float out[kRowBlock][kColumnBlock];
  for (int64_t j0 = 0; j0 < np; j0 += kColumnBlock) {
    std::memset(out, 0, sizeof(out));
    for (int64_t g = 0; g < groups; ++g) {
      __m512i acc[kRowBlock];
      for (int64_t r = 0; r < kRowBlock; ++r) acc[r] = _mm512_setzero_si512();
      for (int64_t kk = g * group; kk < (g + 1) * group; kk += 2) {
        __m512i wv;
        if constexpr (kCodeBits != 8) {
          // 16 bytes of code pairs, as widen_code_pairs does for 8 (the zero-masked forms:
          // GCC 12 flags the plain ones' undefined pass-through vector).
          const __m512i v = _mm512_maskz_cvtepu8_epi32(
              kAll, _mm_loadu_si128(reinterpret_cast<const __m128i*>(nibble_pair_at(w, kk, j0))));
          __m512i low, high;
          if constexpr (kCodeBits == 5) {
            // Each code's fifth bit (a mask bit per column) becomes bit 4 of its index.
            const uint32_t fifth = fifth_bits_at(w, kk, j0);
            const __m512i sixteen = _mm512_set1_epi32(16);
            __m512i low_codes = _mm512_and_si512(v, _mm512_set1_epi32(0x0f));
            __m512i high_codes = _mm512_maskz_srli_epi32(kAll, v, 4);
            low_codes =
                _mm512_mask_or_epi32(low_codes, static_cast<__mmask16>(fifth), low_codes, sixteen);
            high_codes = _mm512_mask_or_epi32(high_codes, static_cast<__mmask16>(fifth >> 16),
                                              high_codes, sixteen);
            low = _mm512_permutex2var_epi32(table, low_codes, table_high);
            high = _mm512_permutex2var_epi32(table, high_codes, table_high);
          } else {
            low = _mm512_maskz_permutexvar_epi32(kAll, v, table);
            high = _mm512_maskz_permutexvar_epi32(kAll, _mm512_maskz_srli_epi32(kAll, v, 4), table);
          }
          wv = _mm512_or_si512(_mm512_and_si512(low, _mm512_set1_epi32(0xffff)),
                               _mm512_maskz_slli_epi32(kAll, high, 16));
        } else {
          wv = _mm512_cvtepi8_epi16(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pair_at(w, kk, j0))));
        }
        for (int64_t r = 0; r < kRowBlock; ++r) {
          int32_t a_pair;
          std::memcpy(&a_pair, block.a16 + r * k + kk, sizeof(a_pair));
          acc[r] = _mm512_dpwssd_epi32(acc[r], wv, _mm512_set1_epi32(a_pair));
        }
      }
      const __m512 ws = _mm512_loadu_ps(scales_gn + g * np + j0);
      for (int64_t r = 0; r < kRowBlock; ++r) {
        const __m512 a_scale = _mm512_set1_ps(block.a_scales[r * groups + g]);
        // The masked form: GCC 12 flags the plain one's undefined pass-through vector.
        const __m512 partial = _mm512_mask_cvtepi32_ps(_mm512_setzero_ps(), 0xffff, acc[r]);
        const __m512 p = _mm512_mul_ps(_mm512_mul_ps(a_scale, ws), partial);
        _mm512_store_ps(out[r], _mm512_add_ps(_mm512_load_ps(out[r]), p));
      }
    }
    const int64_t valid = std::min(kColumnBlock, n - j0);
    for (int64_t r = 0; r < rows; ++r) std::copy(out[r], out[r] + valid, c + r * n + j0);
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
  // The distinct values, ascending; with at most 32 (0 among them: the padding columns), each
  // value is stored as its index among them, in 4 bits where 16 suffice, else 5.
  std::array<bool, 256> present{};
  present[128] = true;
  for (int64_t i = 0; i < k * n; ++i) present[static_cast<size_t>(weight[i] + 128)] = true;
  const auto distinct = std::count(present.begin(), present.end(), true);
  if (distinct <= 32) {
    std::array<uint8_t, 256> code_of{};
    int codes = 0;
    for (int v = 0; v < 256; ++v) {
      if (!present[static_cast<size_t>(v)]) continue;
      code_of[static_cast<size_t>(v)] = static_cast<uint8_t>(codes);
      code_values_[static_cast<size_t>(codes++)] = static_cast<int8_t>(v - 128);
    }
    nibbles_.assign(static_cast<size_t>(k / 2 * np_), 0);
    if (distinct > 16) fifth_bits_.assign(static_cast<size_t>(np_ / kColumnBlock * (k / 2)), 0);
    for (int64_t kk = 0; kk < k; ++kk) {
      const int shift = (kk & 1) * 4;
      for (int64_t col = 0; col < np_; ++col) {
        const int value = col < n ? weight[kk * n + col] : 0;
        const uint8_t code = code_of[static_cast<size_t>(value + 128)];
        const int64_t block = col / kColumnBlock, lane = col % kColumnBlock;
        nibbles_[static_cast<size_t>(block * (k / 2 * kColumnBlock) + (kk / 2) * kColumnBlock +
                                     lane)] |= static_cast<uint8_t>((code & 0x0f) << shift);
        if (code >> 4) {
          fifth_bits_[static_cast<size_t>(block * (k / 2) + kk / 2)] |= 1u
                                                                        << (lane + (kk & 1) * 16);
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

void host_groupwise_gemm(const int8_t* a, const float* a_scales, int64_t m,
                         const HostGroupwiseWeight& w, const float* w_scales, float* c,
                         const ExecContext& context, GroupwiseKernel kernel) {
  const int64_t k = w.k(), n = w.n(), np = w.padded_n(), groups = k / w.group();
  // The weight scales, G x Np (zero for padded columns), so a vector reads 8 columns' scales.
  std::vector<float> scales_gn(static_cast<size_t>(groups * np), 0.0f);
  for (int64_t col = 0; col < n; ++col) {
    for (int64_t g = 0; g < groups; ++g) scales_gn[g * np + col] = w_scales[col * groups + g];
  }
  [[maybe_unused]] const GroupwiseKernel chosen = resolve(kernel);
  const int64_t blocks = (m + kRowBlock - 1) / kRowBlock;
  context.run(static_cast<size_t>(blocks), [&](size_t index) {
    const int64_t row0 = static_cast<int64_t>(index) * kRowBlock;
    const int64_t rows = std::min(kRowBlock, m - row0);
    thread_local std::vector<int16_t> a16_buffer;
    thread_local std::vector<float> scale_buffer;
    int16_t* a16 = sized(a16_buffer, static_cast<size_t>(kRowBlock * k));
    float* scales = sized(scale_buffer, static_cast<size_t>(kRowBlock * groups));
    for (int64_t i = 0; i < rows * k; ++i) a16[i] = a[row0 * k + i];
    std::fill(a16 + rows * k, a16 + kRowBlock * k, int16_t{0});
    std::copy(a_scales + row0 * groups, a_scales + (row0 + rows) * groups, scales);
    std::fill(scales + rows * groups, scales + kRowBlock * groups, 0.0f);
    const RowBlock block{a16, scales, rows};
#if NPUFLOW_HAVE_AVX2_KERNELS
    if (chosen == GroupwiseKernel::kAvx512Vnni) {
      switch (w.code_bits()) {
        case 4:
          block_avx512_vnni<4>(block, w, scales_gn.data(), c + row0 * n, n);
          break;
        case 5:
          block_avx512_vnni<5>(block, w, scales_gn.data(), c + row0 * n, n);
          break;
        default:
          block_avx512_vnni<8>(block, w, scales_gn.data(), c + row0 * n, n);
      }
      return;
    }
    if (chosen == GroupwiseKernel::kAvx2) {
      block_avx2(block, w, scales_gn.data(), c + row0 * n, n);
      return;
    }
#endif
    block_portable(block, w, scales_gn.data(), c + row0 * n, n);
  });
}

}  // namespace npuflow
