// The OrtNodeComputeInfo of one fused integer MatMul group (dynamic int8 or MatMulInteger): moves
// the activation (and a shared DynamicQuantizeLinear's scale and zero point) in and the result
// out; all arithmetic lives in quant/IntegerMatMul.
#pragma once

#include <memory>

#include "ort/fused_node_compute.h"
#include "quant/integer_matmul.h"

namespace npuflow::ort {

struct IntegerNodeBinding {
  size_t activation_input = 0;  // float x (quantize_inside) or the 8-bit A
  bool quantize_inside = false;
  ElementType activation_type = ElementType::kUInt8;  // of the 8-bit A
  int64_t zero_point_input = -1;  // a runtime zero point's input index; -1: the constant below
  int32_t zero_point = 0;
  int64_t scale_input = -1;  // a runtime activation scale's input index (float output)
};

class IntegerNodeCompute final : public FusedNodeCompute {
 public:
  IntegerNodeCompute(std::shared_ptr<const IntegerMatMul> kernel, IntegerNodeBinding binding);

 private:
  Status compute(OrtKernelContext* context) const override;

  std::shared_ptr<const IntegerMatMul> kernel_;
  IntegerNodeBinding binding_;
};

}  // namespace npuflow::ort
