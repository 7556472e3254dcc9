// What the host group-wise GEMM's kernels read (host/groupwise_gemm.h's internals): a panel of a
// weight's columns as stored or decoded, a block of activation rows, and the kernels kept in
// files of their own.
#pragma once

#include <cstdint>
#include <utility>

namespace npuflow::groupwise {

inline constexpr int64_t kColumnBlock = 16;  // two AVX2 vectors of int32
inline constexpr int64_t kRowBlock = 8;      // rows sharing each weight load

// What a kernel reads: np columns of a weight (a multiple of 16, the first `cols` real) in its
// stored form, or decoded into int8 pairs (code_bits 8), with their scales (G rows of
// scale_stride) starting at the first of them.
struct WeightPanel {
  int64_t k = 0, np = 0, cols = 0, group = 0, scale_stride = 0;
  int code_bits = 8;
  const int8_t* pairs = nullptr;
  const uint8_t* nibbles = nullptr;
  const uint32_t* high_bits = nullptr;
  const int8_t* code_values = nullptr;
  const float* scales_gn = nullptr;
  // Or, for vpdpbusd: each value + 128 as an unsigned byte, four consecutive K steps of a column in
  // one 32-bit lane ([np/16][K/4][16][4] bytes).
  const uint8_t* quads = nullptr;
};

// Where the K pair starting at `kk` of the column block starting at `j0` lies: each block of 16
// columns holds its K/2 pairs contiguously, 32 bytes apiece (16 as nibbles), so a kernel streams
// one block's whole K from consecutive cache lines.
inline int64_t pair_offset(int64_t k, int64_t kk, int64_t j0) {
  return (j0 / kColumnBlock) * (k * kColumnBlock) + (kk / 2) * 2 * kColumnBlock;
}
inline const int8_t* pair_at(const WeightPanel& w, int64_t kk, int64_t j0) {
  return w.pairs + pair_offset(w.k, kk, j0);
}
inline const uint8_t* nibble_pair_at(const WeightPanel& w, int64_t kk, int64_t j0) {
  return w.nibbles + (j0 / kColumnBlock) * (w.k / 2 * kColumnBlock) + (kk / 2) * kColumnBlock;
}
// The high bit planes of that pair's 16 columns (5- and 6-bit codes): plane p holds bit 4 + p of
// each code, bit c for column c at kk, bit 16 + c at kk + 1.
inline const uint32_t* high_bits_at(const WeightPanel& w, int64_t kk, int64_t j0) {
  const int64_t planes = w.code_bits - 4;
  return w.high_bits + ((j0 / kColumnBlock) * (w.k / 2) + kk / 2) * planes;
}

// The values of a code pair byte's two codes (K steps kk, kk + 1) in column `j` of its block.
inline std::pair<int8_t, int8_t> code_pair_values(const WeightPanel& w, int64_t kk, int64_t j0,
                                                  int64_t j) {
  const uint8_t byte = nibble_pair_at(w, kk, j0)[j];
  const uint32_t bit4 = w.code_bits >= 5 ? high_bits_at(w, kk, j0)[0] : 0;
  const uint32_t bit5 = w.code_bits == 6 ? high_bits_at(w, kk, j0)[1] : 0;
  const uint32_t low = (byte & 0x0fu) | ((bit4 >> j) & 1u) << 4 | ((bit5 >> j) & 1u) << 5;
  const uint32_t high =
      (byte >> 4u) | ((bit4 >> (16 + j)) & 1u) << 4 | ((bit5 >> (16 + j)) & 1u) << 5;
  return {w.code_values[low], w.code_values[high]};
}

// One block of kRowBlock rows, of which the first `rows` are real (the vector kernels compute all
// of them; the rest are zeros with zero scales): each row's K values widened to int16 (two
// adjacent values read as one int32 are the pair a kernel broadcasts) and its G scales.
struct RowBlock {
  const int16_t* a16;     // kRowBlock x K
  const float* a_scales;  // kRowBlock x G
  int64_t rows;
};

// The same rows as int8 values, for the quads' kernel, with each row's sum per group (the 128s the
// biased weight adds back out: sum (w + 128) a - 128 sum a).
struct ByteRowBlock {
  const int8_t* a8;       // kRowBlock x K
  const int32_t* sums;    // kRowBlock x G
  const float* a_scales;  // kRowBlock x G
  int64_t rows;
};

// The AVX-512 VNNI kernels (host/groupwise_gemm_avx512.cc): one row block against a panel, and the
// columns [j_begin, j_begin + 16 * blocks) of a coded panel decoded into int8 pairs, laid out as a
// panel of their own (`out`: K x 16 * blocks bytes).
void block_avx512_vnni(const RowBlock& block, const WeightPanel& w, float* c, int64_t ldc);
void decode_avx512_vnni(const WeightPanel& coded, int64_t j_begin, int64_t blocks, int8_t* out);
// An int8-pair panel (code_bits 8, K a multiple of 4) rewritten as biased quads (`out`: K x np
// bytes), and one row block against such a panel: a vpdpbusd takes four K steps of 16 columns,
// twice the int16 pairs' products per instruction, and each group's sum loses its 128 sum a.
void quads_avx512_vnni(const WeightPanel& pairs, uint8_t* out);
void block_avx512_vnni_quads(const ByteRowBlock& block, const WeightPanel& w, float* c,
                             int64_t ldc);

}  // namespace npuflow::groupwise
