// The host device's group-wise integer GEMM (Device::gemm_groupwise):
//   c[m][n] = sum_g (a_scales[m][g] * w_scales[n][g]) * float(sum_{k in g} a[m][k] w[k][n])
// with each group's partial exact in int32 and the fp32 sum taken in ascending g, one product and
// one sum rounded per group, never fused: the same bits on every CPU and in every kernel below.
//
// The weight is stored for the kernel: in blocks of 16 columns (N padded to 16 with zero
// columns), each block's K as consecutive pairs, each pair's two values adjacent per column
// ([Np/16][K/2][16][2] int8), so that a multiply-add of int16 pairs (AVX2 vpmaddwd, AVX-512 VNNI
// vpdpwssd) takes two K steps of 8 or 16 columns at once and a block streams its whole K from
// consecutive cache lines. One byte per value, as the int8 weight it came from; or, when the
// weight holds at most 16 distinct values (a GGUF Q4_0, Q4_1 or Q4_K weight's nibble - 8, an
// MXFP4 weight's twice-FP4 values), half a byte: each pair's two values as 4-bit codes in one
// byte's low and high nibble ([Np/16][K/2][16] bytes), which the kernels look up in the weight's
// code table as they load; or, with at most 32 (a Q5_K weight's 5 bits - 16) or 64 (a Q6_K
// weight's 6 bits - 32), 5- or 6-bit codes: the same nibbles, and each code's bits above them in
// one or two planes beside them ([Np/16][K/2][planes] 32-bit words, plane p holding bit 4 + p of
// each code: bit c for column c at the pair's first K step, bit 16 + c at its second).
// A product of one row block (up to 8 rows) reads the codes as it goes; one of more decodes each
// panel of 16 or 64 columns into int8 pairs once per call (K x 64 bytes per thread) and runs every
// row block on that, so the decoding is paid once, not once per row block. On AVX-512 VNNI, with
// groups of whole quads, the panel (codes or int8) is then rewritten as each value + 128 in
// unsigned bytes, four K steps per 32-bit lane, for vpdpbusd (four products per lane where
// vpdpwssd takes two); each group's exact partial is that sum less 128 times the activation's sum
// over the group.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/parallel.h"
#include "device/device.h"

namespace npuflow {

class HostGroupwiseWeight final : public PackedWeight {
 public:
  // weight: row-major K x N; K a multiple of `group`, `group` even.
  HostGroupwiseWeight(const int8_t* weight, int64_t k, int64_t n, ElementType type, int64_t group);
  size_t resident_bytes() const override {
    return pairs_.size() + nibbles_.size() + high_bits_.size() * sizeof(uint32_t);
  }
  int64_t padded_n() const { return np_; }
  // The bits each value is held in: 8 (the value), or 4, 5 or 6 (a code; code_values() maps a
  // code to its value). With codes, pairs() is empty; with 4-bit codes, so is high_bits().
  int code_bits() const { return nibbles_.empty() ? 8 : 4 + high_planes_; }
  const int8_t* pairs() const { return pairs_.data(); }
  const uint8_t* nibbles() const { return nibbles_.data(); }
  const uint32_t* high_bits() const { return high_bits_.data(); }
  const int8_t* code_values() const { return code_values_.data(); }

 private:
  int64_t np_;
  std::vector<int8_t> pairs_;
  std::vector<uint8_t> nibbles_;
  std::vector<uint32_t> high_bits_;
  int high_planes_ = 0;
  std::array<int8_t, 64> code_values_{};
};

// The kernels, all giving the same bits. kAuto: the fastest this CPU has (AVX-512 VNNI, then
// AVX2), or the portable loops where the host ops' vector kernels are turned off (ops/simd.h).
enum class GroupwiseKernel { kAuto, kPortable, kAvx2, kAvx512Vnni };
const char* groupwise_kernel_name(GroupwiseKernel kernel);
// The kernels this CPU can run (kPortable always).
std::vector<GroupwiseKernel> groupwise_kernels_available();

// a: M x K int8 row-major; a_scales M x G; w_scales N x G (G = K / group); c: M x N. A kernel this
// CPU cannot run is replaced by kAuto's choice.
void host_groupwise_gemm(const int8_t* a, const float* a_scales, int64_t m,
                         const HostGroupwiseWeight& w, const float* w_scales, float* c,
                         const ExecContext& context,
                         GroupwiseKernel kernel = GroupwiseKernel::kAuto);

}  // namespace npuflow
