#include "host/vnni_rows_gemm.h"

#include "ops/simd.h"

#if NPUFLOW_HAVE_AVX2_KERNELS
#include <immintrin.h>

#include <cstring>

#define NPUFLOW_TARGET_AVX512_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))
#endif

namespace npuflow::host_onednn {
namespace {

constexpr int64_t kTileColumns = 64;
constexpr int64_t kGroupBytes = kTileColumns * 4;  // one K quad of a tile's 64 columns
// Rows that share one pass over a tile: 6 x 4 accumulators, 4 weight vectors and a broadcast
// stay in 32 registers (4 rows measured 1-5% slower from 16 rows up, bench/int8_few_rows.cc).
constexpr int kRowsPerPass = 6;

#if NPUFLOW_HAVE_AVX2_KERNELS
// One row's four accumulators (64 columns), as named values: GCC keeps an array of vectors
// updated in a loop in registers only by copying each one around every vpdpbusd.
struct RowSums {
  __m512i v0, v1, v2, v3;
};

NPUFLOW_TARGET_AVX512_VNNI inline void add_quad(RowSums& sums, const uint8_t* a_row, int64_t q,
                                                __m512i w0, __m512i w1, __m512i w2, __m512i w3) {
  int32_t quad;
  std::memcpy(&quad, a_row + 4 * q, sizeof(quad));
  const __m512i x = _mm512_set1_epi32(quad);
  sums.v0 = _mm512_dpbusd_epi32(sums.v0, x, w0);
  sums.v1 = _mm512_dpbusd_epi32(sums.v1, x, w1);
  sums.v2 = _mm512_dpbusd_epi32(sums.v2, x, w2);
  sums.v3 = _mm512_dpbusd_epi32(sums.v3, x, w3);
}

NPUFLOW_TARGET_AVX512_VNNI inline void store_row(const RowSums& sums, int64_t columns, int32_t* c) {
  const __m512i values[4] = {sums.v0, sums.v1, sums.v2, sums.v3};
  for (int v = 0; v < 4 && 16 * v < columns; ++v) {
    const int64_t count = columns - 16 * v < 16 ? columns - 16 * v : 16;
    _mm512_mask_storeu_epi32(c + 16 * v, static_cast<__mmask16>((1u << count) - 1u), values[v]);
  }
}

// `kRows` (1..6) rows of one 64-column tile: each K quad of the tile is one 256-byte line of
// weights, multiplied by a broadcast of each row's 4 activation bytes (vpdpbusd).
template <int kRows>
NPUFLOW_TARGET_AVX512_VNNI void tile_rows(const uint8_t* a, int64_t a_stride, const int8_t* tile,
                                          int64_t quads, int64_t columns, int32_t* c, int64_t ldc) {
  const __m512i zero = _mm512_setzero_si512();
  RowSums r0{zero, zero, zero, zero}, r1 = r0, r2 = r0, r3 = r0, r4 = r0, r5 = r0;
  for (int64_t q = 0; q < quads; ++q) {
    const int8_t* line = tile + q * kGroupBytes;
    const __m512i w0 = _mm512_loadu_si512(line);
    const __m512i w1 = _mm512_loadu_si512(line + 64);
    const __m512i w2 = _mm512_loadu_si512(line + 128);
    const __m512i w3 = _mm512_loadu_si512(line + 192);
    add_quad(r0, a, q, w0, w1, w2, w3);
    if constexpr (kRows > 1) add_quad(r1, a + a_stride, q, w0, w1, w2, w3);
    if constexpr (kRows > 2) add_quad(r2, a + 2 * a_stride, q, w0, w1, w2, w3);
    if constexpr (kRows > 3) add_quad(r3, a + 3 * a_stride, q, w0, w1, w2, w3);
    if constexpr (kRows > 4) add_quad(r4, a + 4 * a_stride, q, w0, w1, w2, w3);
    if constexpr (kRows > 5) add_quad(r5, a + 5 * a_stride, q, w0, w1, w2, w3);
  }
  store_row(r0, columns, c);
  if constexpr (kRows > 1) store_row(r1, columns, c + ldc);
  if constexpr (kRows > 2) store_row(r2, columns, c + 2 * ldc);
  if constexpr (kRows > 3) store_row(r3, columns, c + 3 * ldc);
  if constexpr (kRows > 4) store_row(r4, columns, c + 4 * ldc);
  if constexpr (kRows > 5) store_row(r5, columns, c + 5 * ldc);
}

// The pass for 1..kRowsPerPass rows, by count - 1.
constexpr void (*kPasses[kRowsPerPass])(const uint8_t*, int64_t, const int8_t*, int64_t, int64_t,
                                        int32_t*, int64_t) = {
    tile_rows<1>, tile_rows<2>, tile_rows<3>, tile_rows<4>, tile_rows<5>, tile_rows<6>};

NPUFLOW_TARGET_AVX512_VNNI void rows_gemm(const uint8_t* a, int64_t rows, int64_t a_stride,
                                          const VnniTiles& w, int32_t* c, int64_t ldc) {
  const int64_t quads = w.padded_k / 4;
  for (int64_t first = 0; first < w.width; first += kTileColumns) {
    const int8_t* tile = w.data + (first / kTileColumns) * w.tile_stride;
    const int64_t columns = w.width - first < kTileColumns ? w.width - first : kTileColumns;
    for (int64_t row = 0; row < rows; row += kRowsPerPass) {
      const uint8_t* a_rows = a + row * a_stride;
      int32_t* c_rows = c + row * ldc + first;
      const int64_t count = rows - row < kRowsPerPass ? rows - row : kRowsPerPass;
      kPasses[count - 1](a_rows, a_stride, tile, quads, columns, c_rows, ldc);
    }
  }
}
#endif

}  // namespace

bool vnni_rows_kernel_runs() {
#if NPUFLOW_HAVE_AVX2_KERNELS
  return avx512_kernels_active() && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

void vnni_rows_gemm(const uint8_t* a, int64_t rows, int64_t a_stride, const VnniTiles& w,
                    int32_t* c, int64_t ldc) {
#if NPUFLOW_HAVE_AVX2_KERNELS
  if (vnni_rows_kernel_runs()) return rows_gemm(a, rows, a_stride, w, c, ldc);
#endif
  // The same sums in plain loops (other CPUs, portable kernels), from the layout's definition.
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < w.width; ++j) {
      const int8_t* column = w.data + (j / kTileColumns) * w.tile_stride + (j % kTileColumns) * 4;
      uint32_t sum = 0;
      for (int64_t k = 0; k < w.padded_k; ++k) {
        sum += static_cast<uint32_t>(a[r * a_stride + k] * column[(k / 4) * kGroupBytes + k % 4]);
      }
      c[r * ldc + j] = static_cast<int32_t>(sum);
    }
  }
}

}  // namespace npuflow::host_onednn
