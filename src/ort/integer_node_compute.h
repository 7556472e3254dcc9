// The OrtNodeComputeInfo of one fused integer MatMul group (dynamic int8 or MatMulInteger): moves
// the activation (and a shared DynamicQuantizeLinear's scale and zero point) in and the result
// out; all arithmetic lives in quant/IntegerMatMul.
#pragma once

#include <memory>

#include "ort/fused_node_compute.h"
#include "quant/integer_matmul.h"
#include "route/claim_verifier.h"

namespace npuflow::ort {

struct IntegerNodeBinding {
  size_t activation_input = 0;  // float x (quantize_inside) or the 8-bit A
  bool quantize_inside = false;
  bool quantize_rows = false;  // float x quantized per row (a float MatMul taken as int8)
  ElementType activation_type = ElementType::kUInt8;  // of the 8-bit A
  int64_t zero_point_input = -1;  // a runtime zero point's input index; -1: the constant below
  int32_t zero_point = 0;
  int64_t scale_input = -1;  // a runtime activation scale's input index (float output)
  int64_t min_rows = 1;      // the kernel's: fewer rows run the host loop and prove nothing
};

class IntegerNodeCompute final : public FusedNodeCompute {
 public:
  IntegerNodeCompute(std::shared_ptr<const IntegerMatMul> kernel, IntegerNodeBinding binding);
  // Verified (float outputs): reference is the same group on the host device, kept alive by the
  // verifier for as long as it may run.
  IntegerNodeCompute(std::shared_ptr<const IntegerMatMul> kernel, IntegerNodeBinding binding,
                     std::shared_ptr<const ClaimVerifier> verifier, const IntegerMatMul* reference);

 private:
  Status compute(OrtKernelContext* context) const override;
  Status run_kernel(const IntegerMatMul& kernel, const void* a, int32_t zero_point, float scale,
                    int64_t m, void* out, const ExecContext& exec) const;

  std::shared_ptr<const IntegerMatMul> kernel_;
  IntegerNodeBinding binding_;
  std::shared_ptr<const ClaimVerifier> verifier_;  // null: not verified
  const IntegerMatMul* reference_ = nullptr;
};

}  // namespace npuflow::ort
