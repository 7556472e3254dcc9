// A linear layer y = x * W^T whose weight stays quantized: int8 values with one fp32 scale per
// group of K columns (a GGUF Q8_0 weight: 32 values and their scale per block), resident on the
// device, and the activation quantized per block of the same group at run time (ggml's Q8_0 form,
// quant/block_quantization.h). The device's group-wise int8 GEMM then computes
//   y[m][n] = sum_g (a_scale[m][g] * w_scale[n][g]) * float(sum_{k in g} a[m][k] w[n][k])
// which is the CPU backend's Q8_0 x Q8_0 dot product, up to the order of its fp32 sums.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "device/device.h"

namespace npuflow {

// Per-block fp32 factors (N x G, row-major), kept as fp16 when fp16 holds every one exactly (a
// GGUF block's scale and min are fp16s): half the bytes, widened per call.
class BlockFactors {
 public:
  BlockFactors() = default;
  explicit BlockFactors(std::vector<float> values);
  // Factor i = fp16 super[i / per_super] * multipliers[i], the form of a GGUF K-quant's
  // sub-block scales and mins (an fp16 per 256 values times a 6-bit integer per 32): the fp32
  // product is exact, and it is what the CPU backend multiplies by.
  BlockFactors(std::vector<uint16_t> super_bits, std::vector<uint8_t> multipliers,
               int64_t per_super);
  // The same with signed multipliers (a Q6_K weight's 8-bit sub-block scales).
  BlockFactors(std::vector<uint16_t> super_bits, const std::vector<int8_t>& multipliers,
               int64_t per_super);
  size_t bytes() const {
    return half_.size() * sizeof(uint16_t) + full_.size() * sizeof(float) + multipliers_.size();
  }
  size_t size() const {
    return multipliers_.empty() ? half_.size() + full_.size() : multipliers_.size();
  }
  bool empty() const { return size() == 0; }
  // The factors as fp32: the kept ones, or `buffer` filled with them widened.
  const float* values(std::vector<float>& buffer) const;

 private:
  std::vector<uint16_t> half_;  // fp16 bits, when every factor is exactly an fp16
  std::vector<float> full_;     // otherwise
  // The factored form: half_ then holds one fp16 per per_super_ factors.
  std::vector<uint8_t> multipliers_;
  int64_t per_super_ = 0;
  bool signed_multipliers_ = false;  // multipliers_ holds int8 bits
};

// The activation's block form, the one the CPU backend's dot product for the weight's type
// quantizes to (its vec_dot_type), and with it how the weight's mins enter.
enum class ActivationBlocks {
  kQ8_0,  // Q8_0 and Q4_0 weights: no min
  kQ8_1,  // Q4_1: + m_w s_x per block, s_x = fp16(d_x sum(q_x))
  kQ8_K,  // Q4_K, Q5_K: one fp32 d_x per 256 values; + min_w d_x sum(q_x) per 32. Q6_K: no min
};

// A group-wise weight's per-block factors (N x K/group each): scales, mins (empty when the blocks
// have none) and the activation form they pair with. A weight with mins stores its unsigned
// values less value_offset (a nibble - 8; Q5_K's 5 bits - 16), which the min pass adds back.
// group: 32, or 16 for a Q8_K weight without mins (Q6_K's sub-blocks).
struct GroupwiseFactors {
  BlockFactors scales;
  BlockFactors mins;
  ActivationBlocks activation = ActivationBlocks::kQ8_0;
  int value_offset = 8;
  int64_t group = 32;
};

// The device's packed group-wise weight and its scales, which the GEMM takes per call, and, for
// a weight whose blocks add a min (GGUF Q4_1: x = d q + m), the mins.
class GroupwiseLinearWeight final : public PackedWeight {
 public:
  GroupwiseLinearWeight(std::unique_ptr<PackedWeight> packed, GroupwiseFactors factors)
      : PackedWeight(packed->k(), packed->n(), packed->type(), packed->group()),
        packed_(std::move(packed)),
        factors_(std::move(factors)) {}
  size_t resident_bytes() const override {
    return packed_->resident_bytes() + factors_.scales.bytes() + factors_.mins.bytes();
  }
  const PackedWeight& packed() const { return *packed_; }
  const BlockFactors& scales() const { return factors_.scales; }
  const BlockFactors& mins() const { return factors_.mins; }
  ActivationBlocks activation() const { return factors_.activation; }
  int value_offset() const { return factors_.value_offset; }

 private:
  std::unique_ptr<PackedWeight> packed_;
  GroupwiseFactors factors_;
};

// rows: W as N rows of K int8 values (the layout of a GGUF / PyTorch linear weight); scales: N x
// (K / group) fp32. Only group 32 is served (the activation blocks are Q8_0's).
// mins (optional, N x (K / group)): each block's added constant, for weights stored as
// x = d (q + 8) + m with q = rows' values in [-8, 7] (a GGUF Q4_1 block, nibble q + 8). The
// activation is then quantized in ggml's Q8_1 form, and the product is the CPU backend's
// Q4_1 x Q8_1 dot product: sum_g d_w d_x sum(q_w8 q_x) + m_w s_x, q_w8 = q + 8, s_x = the
// block's fp16 d sum(q_x).
Result<std::unique_ptr<PackedWeight>> pack_groupwise_linear(Device& device, const int8_t* rows,
                                                            std::vector<float> scales, int64_t k,
                                                            int64_t n, int64_t group,
                                                            std::vector<float> mins = {});

// The general form, at factors.group. ActivationBlocks::kQ8_K (a GGUF Q4_K weight: x = d sc
// nibble - dmin m per 32, values stored as nibble - 8) needs K a multiple of 256; the product is
// then the CPU backend's Q4_K x Q8_K dot product, sum_g d_x (d sc)_w sum(nibble q_x) - d_x (dmin
// m)_w sum(q_x), with mins holding -dmin m. Without mins (a GGUF Q6_K weight, group 16: x = d sc
// q) it is sum_g d_x (d sc)_w sum(q q_x). A device whose group-wise GEMM refuses the group answers
// kUnsupported.
Result<std::unique_ptr<PackedWeight>> pack_groupwise_linear(Device& device, const int8_t* rows,
                                                            GroupwiseFactors factors, int64_t k,
                                                            int64_t n);

// y = x W^T for x M x K and y M x N, fp32 and row-major; weight from pack_groupwise_linear. An
// activation holding a NaN or an infinity is refused (kUnsupported) for the host reference, which
// carries it through as fp32 arithmetic does.
Status run_groupwise_linear(Device& device, const float* x, int64_t m, const PackedWeight& weight,
                            float* y, const ExecContext& context);

}  // namespace npuflow
