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

// The device's packed group-wise weight and its scales, which the GEMM takes per call. Scales
// that fp16 holds exactly (a GGUF block's scale is an fp16) are kept as fp16, half the bytes, and
// widened per call; others stay fp32.
class GroupwiseLinearWeight final : public PackedWeight {
 public:
  GroupwiseLinearWeight(std::unique_ptr<PackedWeight> packed, std::vector<float> scales);
  size_t resident_bytes() const override {
    return packed_->resident_bytes() + half_scales_.size() * sizeof(uint16_t) +
           scales_.size() * sizeof(float);
  }
  const PackedWeight& packed() const { return *packed_; }
  // N x (K / group) fp32, row-major: the kept scales, or `buffer` filled with them widened.
  const float* scales(std::vector<float>& buffer) const;

 private:
  std::unique_ptr<PackedWeight> packed_;
  std::vector<uint16_t> half_scales_;  // fp16 bits, when every scale is exactly an fp16
  std::vector<float> scales_;          // otherwise
};

// rows: W as N rows of K int8 values (the layout of a GGUF / PyTorch linear weight); scales: N x
// (K / group) fp32. Only group 32 is served (the activation blocks are Q8_0's).
Result<std::unique_ptr<PackedWeight>> pack_groupwise_linear(Device& device, const int8_t* rows,
                                                            std::vector<float> scales, int64_t k,
                                                            int64_t n, int64_t group);

// y = x W^T for x M x K and y M x N, fp32 and row-major; weight from pack_groupwise_linear. An
// activation holding a NaN or an infinity is refused (kUnsupported) for the host reference, which
// carries it through as fp32 arithmetic does.
Status run_groupwise_linear(Device& device, const float* x, int64_t m, const PackedWeight& weight,
                            float* y, const ExecContext& context);

}  // namespace npuflow
