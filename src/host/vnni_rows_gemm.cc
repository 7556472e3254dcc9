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
// Rows that share one pass over a tile: 4 x 4 accumulators, 4 weight vectors and a broadcast
// stay in 32 registers.
constexpr int kRowsPerPass = 4;

#if NPUFLOW_HAVE_AVX2_KERNELS
// `rows` (1..4) rows of one 64-column tile: each K quad of the tile is one 256-byte line of
// weights, multiplied by a broadcast of the row's 4 activation bytes (vpdpbusd).
template <int kRows>
NPUFLOW_TARGET_AVX512_VNNI void tile_rows(const uint8_t* a, int64_t a_stride, const int8_t* tile,
                                          int64_t quads, int64_t columns, int32_t* c, int64_t ldc) {
  __m512i acc[kRows][4];
  for (int r = 0; r < kRows; ++r) {
    for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_setzero_si512();
  }
  for (int64_t q = 0; q < quads; ++q) {
    const int8_t* line = tile + q * kGroupBytes;
    const __m512i w0 = _mm512_loadu_si512(line);
    const __m512i w1 = _mm512_loadu_si512(line + 64);
    const __m512i w2 = _mm512_loadu_si512(line + 128);
    const __m512i w3 = _mm512_loadu_si512(line + 192);
    for (int r = 0; r < kRows; ++r) {
      int32_t quad;
      std::memcpy(&quad, a + r * a_stride + 4 * q, sizeof(quad));
      const __m512i x = _mm512_set1_epi32(quad);
      acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], x, w0);
      acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], x, w1);
      acc[r][2] = _mm512_dpbusd_epi32(acc[r][2], x, w2);
      acc[r][3] = _mm512_dpbusd_epi32(acc[r][3], x, w3);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int v = 0; v < 4; ++v) {
      const int64_t first = 16 * v;
      if (first >= columns) break;
      const int64_t count = columns - first < 16 ? columns - first : 16;
      const __mmask16 mask = static_cast<__mmask16>((1u << count) - 1u);
      _mm512_mask_storeu_epi32(c + r * ldc + first, mask, acc[r][v]);
    }
  }
}

NPUFLOW_TARGET_AVX512_VNNI void rows_gemm(const uint8_t* a, int64_t rows, int64_t a_stride,
                                          const VnniTiles& w, int32_t* c, int64_t ldc) {
  const int64_t quads = w.padded_k / 4;
  for (int64_t first = 0; first < w.width; first += kTileColumns) {
    const int8_t* tile = w.data + (first / kTileColumns) * w.tile_stride;
    const int64_t columns = w.width - first < kTileColumns ? w.width - first : kTileColumns;
    for (int64_t row = 0; row < rows; row += kRowsPerPass) {
      const uint8_t* a_rows = a + row * a_stride;
      int32_t* c_rows = c + row * ldc + first;
      switch (rows - row < kRowsPerPass ? rows - row : kRowsPerPass) {
        case 1:
          tile_rows<1>(a_rows, a_stride, tile, quads, columns, c_rows, ldc);
          break;
        case 2:
          tile_rows<2>(a_rows, a_stride, tile, quads, columns, c_rows, ldc);
          break;
        case 3:
          tile_rows<3>(a_rows, a_stride, tile, quads, columns, c_rows, ldc);
          break;
        default:
          tile_rows<4>(a_rows, a_stride, tile, quads, columns, c_rows, ldc);
          break;
      }
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
