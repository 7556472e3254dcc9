// The OrtNodeComputeInfo of one claimed ConvTranspose: reads the float input, allocates the
// output ONNX's attributes give it and runs the kernel (ops/ConvTranspose2d). With `verify`, the
// same node built on the host device is the reference a ClaimVerifier checks the first run
// against.
#pragma once

#include <memory>

#include "ops/conv_transpose.h"
#include "ort/fused_node_compute.h"
#include "route/claim_verifier.h"

namespace npuflow::ort {

class ConvTransposeNodeCompute final : public FusedNodeCompute {
 public:
  // input_index: the position of the ConvTranspose's input among the fused node's inputs.
  ConvTransposeNodeCompute(std::shared_ptr<const ConvTranspose2d> kernel, size_t input_index,
                           std::shared_ptr<const ClaimVerifier> verifier = nullptr,
                           const ConvTranspose2d* reference = nullptr);

 private:
  Status compute(OrtKernelContext* context) const override;

  std::shared_ptr<const ConvTranspose2d> kernel_;
  size_t input_index_;
  std::shared_ptr<const ClaimVerifier> verifier_;  // null: not verified
  const ConvTranspose2d* reference_ = nullptr;
};

}  // namespace npuflow::ort
