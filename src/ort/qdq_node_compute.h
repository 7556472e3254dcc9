// The OrtNodeComputeInfo of one fused QDQ MatMul node: moves the activation in and the result
// out; all arithmetic lives in quant/QdqMatMul.
#pragma once

#include <memory>

#include "ort/fused_node_compute.h"
#include "quant/qdq_matmul.h"

namespace npuflow::ort {

struct QdqNodeBinding {
  size_t activation_input = 0;  // index among the fused node's inputs
  ElementType activation_type;  // int8/uint8 (or the type a float input was quantized from)
  bool activation_dequantized = false;
};

class QdqNodeCompute final : public FusedNodeCompute {
 public:
  QdqNodeCompute(std::shared_ptr<const QdqMatMul> kernel, QdqNodeBinding binding);

 private:
  Status compute(OrtKernelContext* context) const override;

  std::shared_ptr<const QdqMatMul> kernel_;
  QdqNodeBinding binding_;
};

}  // namespace npuflow::ort
