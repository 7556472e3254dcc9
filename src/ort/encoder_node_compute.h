// The OrtNodeComputeInfo of one fused vision-encoder node: reads the pixels (or the stream) and
// any runtime side operands, allocates every exit and runs the resident plan (ops/VitEncoder).
#pragma once

#include <memory>
#include <vector>

#include "ops/vit_encoder.h"
#include "ort/fused_node_compute.h"

namespace npuflow::ort {

struct EncoderNodeBinding {
  size_t main_input = 0;            // index among the fused node's inputs
  std::vector<size_t> side_inputs;  // by VitEncoderSpec side input_index
  std::vector<int> output_exit;     // per fused-node output: the plan's exit index
};

class EncoderNodeCompute final : public FusedNodeCompute {
 public:
  EncoderNodeCompute(std::shared_ptr<const VitEncoder> plan, EncoderNodeBinding binding);

 private:
  Status compute(OrtKernelContext* context) const override;

  std::shared_ptr<const VitEncoder> plan_;
  EncoderNodeBinding binding_;
};

}  // namespace npuflow::ort
