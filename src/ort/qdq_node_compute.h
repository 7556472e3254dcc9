// The OrtNodeComputeInfo of one fused QDQ MatMul node: moves the activation in and the result
// out; all arithmetic lives in quant/QdqMatMul. With `verify`, a second QdqMatMul on the host
// device is the reference a ClaimVerifier checks the first device run against.
#pragma once

#include <memory>

#include "ort/fused_node_compute.h"
#include "quant/qdq_matmul.h"
#include "quant/row_quantization.h"
#include "route/claim_verifier.h"

namespace npuflow::ort {

struct QdqNodeBinding {
  size_t activation_input = 0;  // index among the fused node's inputs
  ElementType activation_type;  // int8/uint8 (or the type a float input was quantized from)
  bool activation_dequantized = false;
  int64_t min_rows = 1;  // the kernel's: fewer rows run the host loop and prove nothing
  // Per-row activation quantization (the spec's x_per_row): along `x_axis` of the activation,
  // constants, or the fused node inputs given (-1: the constants).
  int64_t x_axis = 0;
  std::vector<float> x_scales;
  std::vector<int32_t> x_zero_points;
  int64_t x_scale_input = -1, x_zero_point_input = -1;
};

class QdqNodeCompute final : public FusedNodeCompute {
 public:
  QdqNodeCompute(std::shared_ptr<const QdqMatMul> kernel, QdqNodeBinding binding);
  // Verified: reference is the same group on the host device, kept alive by the verifier for as
  // long as it may run.
  QdqNodeCompute(std::shared_ptr<const QdqMatMul> kernel, QdqNodeBinding binding,
                 std::shared_ptr<const ClaimVerifier> verifier, const QdqMatMul* reference);

 private:
  Status compute(OrtKernelContext* context) const override;
  Status run_kernel(const QdqMatMul& kernel, const void* a, int64_t m, void* out,
                    const ExecContext& exec, const RowQuantization* rows) const;
  // This run's per-row scales and zero points, from the binding's constants or inputs.
  Status row_quantization(OrtKernelContext* context, const std::vector<int64_t>& dims,
                          RowQuantizationBuffers& out) const;

  std::shared_ptr<const QdqMatMul> kernel_;
  QdqNodeBinding binding_;
  std::shared_ptr<const ClaimVerifier> verifier_;  // null: not verified
  const QdqMatMul* reference_ = nullptr;
};

}  // namespace npuflow::ort
