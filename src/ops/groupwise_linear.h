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
  explicit BlockFactors(std::vector<float> values);
  size_t bytes() const { return half_.size() * sizeof(uint16_t) + full_.size() * sizeof(float); }
  bool empty() const { return half_.empty() && full_.empty(); }
  // The factors as fp32: the kept ones, or `buffer` filled with them widened.
  const float* values(std::vector<float>& buffer) const;

 private:
  std::vector<uint16_t> half_;  // fp16 bits, when every factor is exactly an fp16
  std::vector<float> full_;     // otherwise
};

// The device's packed group-wise weight and its scales, which the GEMM takes per call, and, for
// a weight whose blocks add a min (GGUF Q4_1: x = d q + m), the mins.
class GroupwiseLinearWeight final : public PackedWeight {
 public:
  GroupwiseLinearWeight(std::unique_ptr<PackedWeight> packed, std::vector<float> scales,
                        std::vector<float> mins)
      : PackedWeight(packed->k(), packed->n(), packed->type(), packed->group()),
        packed_(std::move(packed)),
        scales_(std::move(scales)),
        mins_(std::move(mins)) {}
  size_t resident_bytes() const override {
    return packed_->resident_bytes() + scales_.bytes() + mins_.bytes();
  }
  const PackedWeight& packed() const { return *packed_; }
  const BlockFactors& scales() const { return scales_; }
  const BlockFactors& mins() const { return mins_; }

 private:
  std::unique_ptr<PackedWeight> packed_;
  BlockFactors scales_;
  BlockFactors mins_;  // empty when the blocks have none
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

// y = x W^T for x M x K and y M x N, fp32 and row-major; weight from pack_groupwise_linear. An
// activation holding a NaN or an infinity is refused (kUnsupported) for the host reference, which
// carries it through as fp32 arithmetic does.
Status run_groupwise_linear(Device& device, const float* x, int64_t m, const PackedWeight& weight,
                            float* y, const ExecContext& context);

}  // namespace npuflow
