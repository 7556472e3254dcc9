// The OrtNodeComputeInfo of a fused tensor-program node (the program_ops test knob): reads its
// inputs as they come, runs the program and writes each output with the shape it computed.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "graph/graph_view.h"
#include "ops/tensor_program.h"
#include "ort/fused_node_compute.h"

namespace npuflow::ort {

struct ProgramNodeBinding {
  std::vector<size_t> inputs;   // the fused node input of each program input
  std::vector<size_t> outputs;  // the program output of each fused node output
};

// Copies the program's constants out of the fused subgraph (valid during Compile only).
Status load_program_constants(const GraphView& view, TensorProgram& program);
// The fused node input of each program input.
Status bind_program_inputs(const TensorProgram& program, const std::vector<std::string>& inputs,
                           std::vector<size_t>& indices);

class ProgramNodeCompute final : public FusedNodeCompute {
 public:
  ProgramNodeCompute(std::shared_ptr<const TensorProgram> program, ProgramNodeBinding binding);

 private:
  Status compute(OrtKernelContext* context) const override;

  std::shared_ptr<const TensorProgram> program_;
  ProgramNodeBinding binding_;
};

}  // namespace npuflow::ort
