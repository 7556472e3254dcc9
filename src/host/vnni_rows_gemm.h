// A few rows of uint8 activations against an int8 weight block in the layout oneDNN packs for its
// AVX-512 VNNI kernels (BA16a64b4a), without oneDNN: at one to a few rows a oneDNN execution per
// block costs a stream, three memory objects and their allocations, about as much as the
// product itself, while the product only streams the weight once.
#pragma once

#include <cstdint>

namespace npuflow::host_onednn {

// A packed K x width block in BA16a64b4a: tiles of 64 columns, `tile_stride` bytes apart, each
// [padded_k / 4][64 columns][4 consecutive k] bytes, zero past K and past width.
struct VnniTiles {
  const int8_t* data = nullptr;
  int64_t padded_k = 0;  // a multiple of 64
  int64_t width = 0;
  int64_t tile_stride = 0;
};

// True where the vector kernel runs: an x86-64 CPU with AVX-512F, BW and VNNI, and the host's
// vector kernels not switched off on this thread (host_kernels=portable, tests).
bool vnni_rows_kernel_runs();

// The vector kernel where it runs, else plain loops over the same layout (slow: for tests).
// c[r][j] = sum_k a[r][k] * w[k][j] for r < rows, j < w.width, in wrapping int32 arithmetic (as
// oneDNN's kernel computes it). Each activation row holds w.padded_k bytes, zero past K.
void vnni_rows_gemm(const uint8_t* a, int64_t rows, int64_t a_stride, const VnniTiles& w,
                    int32_t* c, int64_t ldc);

}  // namespace npuflow::host_onednn
