// The OrtNodeComputeInfo of one fused encoder node: reads the pixels (or the stream) and any
// runtime side operands, runs the claim's tensor program (a text encoder's embedding and masks)
// when it has one, allocates every exit and runs the resident plan (ops/VitEncoder).
// With `verify`, the same plan built on the host device is the reference a ClaimVerifier checks
// the first run against.
#pragma once

#include <memory>
#include <vector>

#include "ops/tensor_program.h"
#include "ops/vit_encoder.h"
#include "ort/fused_node_compute.h"
#include "route/claim_verifier.h"

namespace npuflow::ort {

// Where the plan's main input or a side input comes from: a fused node input (by index), or an
// output of the claim's tensor program.
struct EncoderInputSource {
  bool from_program = false;
  size_t index = 0;
};

struct EncoderNodeBinding {
  EncoderInputSource main_input;
  std::vector<EncoderInputSource> side_inputs;   // by VitEncoderSpec side input_index
  std::vector<int> output_exit;                  // per fused-node output: the plan's exit index
  std::shared_ptr<const TensorProgram> program;  // null: none
  std::vector<size_t> program_inputs;            // the fused node input of each program input
  bool portable_kernels = false;                 // host_kernels=portable
};

class EncoderNodeCompute final : public FusedNodeCompute {
 public:
  EncoderNodeCompute(std::shared_ptr<const VitEncoder> plan, EncoderNodeBinding binding);
  // Verified: reference is the same encoder planned on the host device, kept alive by the
  // verifier for as long as it may run.
  EncoderNodeCompute(std::shared_ptr<const VitEncoder> plan, EncoderNodeBinding binding,
                     std::shared_ptr<const ClaimVerifier> verifier, const VitEncoder* reference);

 private:
  Status compute(OrtKernelContext* context) const override;
  // Runs `plan` writing the fused node's outputs into `outputs` (scratch for other exits).
  Status run_plan(const VitEncoder& plan, const FloatInput& main,
                  const std::vector<FloatInput>& side, const std::vector<NodeOutput>& outputs,
                  const ExecContext& exec) const;

  std::shared_ptr<const VitEncoder> plan_;
  EncoderNodeBinding binding_;
  std::shared_ptr<const ClaimVerifier> verifier_;  // null: not verified
  const VitEncoder* reference_ = nullptr;
};

}  // namespace npuflow::ort
