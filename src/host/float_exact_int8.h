// Exact int8 GEMMs on float32 kernels, for CPUs whose oneDNN int8 kernels add product pairs in
// int16 with saturation (no VNNI): there oneDNN's fp32 GEMM is also about twice as fast as its
// int8 one.
//
// A uint8 activation is shifted by -128 (its column-sum correction is added back after), so every
// product a * w has |a * w| <= 128 * 128 = 2^14. Over at most kExactFloatChunk rows of K every
// partial sum, in any order a kernel adds them, is an integer of magnitude <= 2^24: exact in
// float32, and so is the chunk's result. Longer K is cut into equal chunks summed in int32.
#pragma once

#include <cstdint>

#include "core/element_type.h"

namespace npuflow {

inline constexpr int64_t kExactFloatChunk = 1024;  // 2^24 / 2^14

// How K is cut: `count` chunks, chunk c covering [begin(c), begin(c + 1)).
struct FloatChunks {
  int64_t k = 0;
  int64_t count = 0;
  int64_t begin(int64_t chunk) const { return chunk * k / count; }
  int64_t size(int64_t chunk) const { return begin(chunk + 1) - begin(chunk); }
};
FloatChunks float_chunks_for(int64_t k);

// The weight's rows [begin, begin + size) of a row-major K x N int8 matrix, as float.
void widen_weight_rows(const int8_t* weight, int64_t n, int64_t begin, int64_t size, float* out);

// Columns [begin, begin + size) of an M x K int8/uint8 activation, as a dense M x size float
// matrix; uint8 values are shifted by -128.
void widen_activation_columns(const void* a, ElementType a_type, int64_t m, int64_t k,
                              int64_t begin, int64_t size, float* out);

// What the uint8 shift takes from column n: 128 * sum_k w[k][n] (0 for int8 activations).
inline int32_t shift_correction(ElementType a_type, int32_t column_sum) {
  return a_type == ElementType::kUInt8 ? 128 * column_sum : 0;
}

}  // namespace npuflow
