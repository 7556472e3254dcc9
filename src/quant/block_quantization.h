// Block-wise int8 quantization of activations in ggml's Q8_0 form, the activation a Q8_0 or Q4_0
// weight's CPU dot product sees: every run of 32 values along a row gets the scale d = amax / 127,
// rounded to fp16 (the scale ggml stores and multiplies by), and values round(x * id) in
// [-127, 127]; an all-zero block gets d = 0 and zeros. id and the rounding are those of the CPU
// backend's quantize_row_q8_0 on this architecture (ggml-cpu/arch/*/quants.c), so that a device's
// group-wise int8 GEMM on these blocks computes what the CPU backend computes, up to the order of
// its fp32 sums:
//   x86-64 (its AVX/AVX2 kernel): id = 127 / amax, ties to even;
//   arm64 (its NEON kernel):      id = 1 / d,      ties to even;
//   elsewhere (ggml's reference): id = 1 / d,      ties away from zero.
// The difference shows on real inputs: SmolLM2's embedding rows land on exact ties, and with
// ggml's reference rounding its first projections were 1e-6 (NMSE) from the CPU's product.
#pragma once

#include <cstdint>

#include "core/parallel.h"

namespace npuflow {

inline constexpr int64_t kQ8BlockValues = 32;

// x: m rows of k floats, k a multiple of 32. q: m x k int8; scales: m x (k / 32) floats. False
// (outputs unspecified) when x holds a NaN or an infinity, which no block scale can carry.
// sums (m x (k / 32), optional): ggml's Q8_1 form adds each block's s = fp16(d * sum(q)), with d
// the unrounded amax / 127 (quantize_row_q8_1 on every architecture); the values and scales of
// the two forms are the same.
bool quantize_rows_q8_blocks(const float* x, int64_t m, int64_t k, int8_t* q, float* scales,
                             const ExecContext& context, float* sums = nullptr);

// ggml's Q8_K form, the activation of a K-quant weight (quantize_row_q8_K_ref, which the CPU
// backend uses on every architecture): one fp32 scale per 256 values, iscale = -127 / max with
// max the block's value of largest magnitude (sign kept, first one on ties), q = round(x * iscale)
// ties to even (nearest_int) capped at 127, d = 1 / iscale; an all-zero block gets d = 0.
// k a multiple of 256. scales: m x (k / group), each group of `group` values (16 or 32: a divisor
// of 256) carrying its block's d; sums (m x (k / group), nullptr: not wanted): d * sum(q) over the
// group, in fp32 (the CPU's bsums scaled by d). False when x holds a NaN or an infinity.
inline constexpr int64_t kQ8KBlockValues = 256;
bool quantize_rows_q8_k(const float* x, int64_t m, int64_t k, int8_t* q, float* scales, float* sums,
                        const ExecContext& context, int64_t group = kQ8BlockValues);

}  // namespace npuflow
