// The RK3588 NPU's matmul arithmetic per worker slice (shared/reference/rk3588-npu.md §2):
//
//   fp16, KACC on (library default): operands are fp16; within a K tile products are exact and
//     accumulate in fp32 (ascending k; the hardware's order is unknown [U]); K tiles run in
//     ascending order and out_k = fp16(conv_k + out_{k-1}), the add done in fp32 and rounded
//     once to fp16 (round to nearest even; the exact rounding point is unknown [U]).
//   fp16, host accumulation (ROCKET_KACC=0, and KACC's tiny-M path): each tile is rounded to
//     fp16, the tiles are summed in a host float32 accumulator in ki order, the total is rounded
//     to fp16.
//   fp16 -> fp32 out (`_f32out`): each tile's fp32 partial is summed on the host in double.
//   int8: each tile's int32 is exact; the host sums them in int64 and casts to int32.
//   int4: each tile's partial is int16 and saturates; the host sums them into int32.
//   group-wise: Kt divides the group; a group's exact partial p_g (int8; int4 from saturating
//     tiles) gives c = sum_g (a_scale * w_scale) * float(p_g) in fp32, g ascending.
//
// Only the K tiling changes results; how M and N are tiled does not. Operands are row-major:
// a is rows x lda, w is K x ldw, and a slice covers columns [n0, n0 + n).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "sim/rk3588_contract.h"

namespace npuflow::sim {

// The `sim_kacc` knob: where fp16 K tiles are accumulated.
enum class KAccMode { kNpu, kHost };
const char* kacc_mode_name(KAccMode mode);
std::optional<KAccMode> parse_kacc_mode(std::string_view text);

enum class Fp16Accumulation { kNpuKacc, kHostFp32, kFp32Out };
const char* fp16_accumulation_name(Fp16Accumulation accumulation);

// What a call does: fp32 output sums in double; KACC falls back to host accumulation when the
// last M tile has fewer than 12 rows (several M tiles), or M < 12 with several K tiles.
Fp16Accumulation choose_fp16_accumulation(KAccMode mode, bool fp32_out, int64_t m,
                                          const TilePlan& plan);

struct SliceRows {
  int64_t row0 = 0, rows = 0;  // rows of a (and c) to compute
  int64_t n0 = 0, n = 0;       // columns of w (and c)
  int64_t k = 0, kt = 0;       // contraction length and the slice's K tile
};

// a, w: fp16 values widened to float (exact). c: uint16_t fp16 bits, or float for kFp32Out.
void fp16_slice(const float* a, int64_t lda, const float* w, int64_t ldw, const SliceRows& s,
                Fp16Accumulation accumulation, void* c, int64_t ldc);
void int8_slice(const int8_t* a, int64_t lda, const int8_t* w, int64_t ldw, const SliceRows& s,
                int32_t* c, int64_t ldc);
void int4_slice(const int8_t* a, int64_t lda, const int8_t* w, int64_t ldw, const SliceRows& s,
                int32_t* c, int64_t ldc);
// a_scales: rows of a x groups (row-major, indexed by absolute row); w_scales: N x groups
// (indexed by absolute column). int4 saturates each tile at int16.
void groupwise_slice(const int8_t* a, int64_t lda, const float* a_scales, const int8_t* w,
                     int64_t ldw, const float* w_scales, int64_t group, bool int4,
                     const SliceRows& s, float* c, int64_t ldc);

}  // namespace npuflow::sim
