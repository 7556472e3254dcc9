// The OrtNodeComputeInfo of one fused vision-encoder node: reads the pixels (or the stream) and
// any runtime side operands, allocates every exit and runs the resident plan (ops/VitEncoder).
#pragma once

#include <memory>
#include <vector>

#include "ops/vit_encoder.h"
#include "ort/ort_api.h"

namespace npuflow::ort {

struct EncoderNodeBinding {
  size_t main_input = 0;            // index among the fused node's inputs
  std::vector<size_t> side_inputs;  // by VitEncoderSpec side input_index
  std::vector<int> output_exit;     // per fused-node output: the plan's exit index
};

class EncoderNodeCompute : public OrtNodeComputeInfo {
 public:
  EncoderNodeCompute(std::shared_ptr<const VitEncoder> plan, EncoderNodeBinding binding);
  static bool is_encoder(const OrtNodeComputeInfo* info) { return info->Compute == ComputeImpl; }

 private:
  Status compute(OrtKernelContext* context) const;

  static OrtStatus* ORT_API_CALL CreateStateImpl(OrtNodeComputeInfo* self,
                                                 OrtNodeComputeContext* context,
                                                 void** state) noexcept;
  static OrtStatus* ORT_API_CALL ComputeImpl(OrtNodeComputeInfo* self, void* state,
                                             OrtKernelContext* context) noexcept;
  static void ORT_API_CALL ReleaseStateImpl(OrtNodeComputeInfo* self, void* state) noexcept;

  std::shared_ptr<const VitEncoder> plan_;
  EncoderNodeBinding binding_;
};

}  // namespace npuflow::ort
