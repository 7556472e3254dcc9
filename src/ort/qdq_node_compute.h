// The OrtNodeComputeInfo of one fused QDQ MatMul node: moves the activation in and the result
// out; all arithmetic lives in quant/QdqMatMul.
#pragma once

#include <memory>

#include "ort/ort_api.h"
#include "quant/qdq_matmul.h"

namespace npuflow::ort {

struct QdqNodeBinding {
  size_t activation_input = 0;  // index among the fused node's inputs
  ElementType activation_type;  // int8/uint8 (or the type a float input was quantized from)
  bool activation_dequantized = false;
};

class QdqNodeCompute : public OrtNodeComputeInfo {
 public:
  QdqNodeCompute(std::shared_ptr<const QdqMatMul> kernel, QdqNodeBinding binding);

 private:
  Status compute(OrtKernelContext* context) const;

  static OrtStatus* ORT_API_CALL CreateStateImpl(OrtNodeComputeInfo* self,
                                                 OrtNodeComputeContext* context,
                                                 void** state) noexcept;
  static OrtStatus* ORT_API_CALL ComputeImpl(OrtNodeComputeInfo* self, void* state,
                                             OrtKernelContext* context) noexcept;
  static void ORT_API_CALL ReleaseStateImpl(OrtNodeComputeInfo* self, void* state) noexcept;

  std::shared_ptr<const QdqMatMul> kernel_;
  QdqNodeBinding binding_;
};

}  // namespace npuflow::ort
