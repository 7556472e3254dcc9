// Compiling a claimed tensor program (the program_ops test knob), and the steps every program
// compile shares with the encoder's: constants copied out of the fused subgraph, inputs bound to
// the fused node's by name.
#include "core/strings.h"
#include "ort/fused_node_inputs.h"
#include "ort/npuflow_ep.h"
#include "ort/program_node_compute.h"

namespace npuflow::ort {

Status load_program_constants(const GraphView& view, TensorProgram& program) {
  for (ProgramConstant& c : program.constants) {
    const ValueId id = view.find_value(c.name);
    if (!view.is_constant(id)) {
      return internal_error(str_cat("program constant '", c.name, "' is missing at compile time"));
    }
    const ValueInfo& v = view.value(id);
    if (!program_type_supported(v.type) ||
        static_cast<size_t>(element_count(v.shape)) * element_size(v.type) != v.constant->bytes)
      return internal_error(str_cat("program constant '", c.name, "' is not a readable tensor"));
    c.value = ProgramTensor::copy_of(v.type, v.shape, v.constant->data);
  }
  return Status::ok();
}

Status bind_program_inputs(const TensorProgram& program, const std::vector<std::string>& inputs,
                           std::vector<size_t>& indices) {
  indices.clear();
  for (const std::string& name : program.input_names) {
    auto index = index_of(inputs, name);
    if (!index) return internal_error(str_cat("program input '", name, "' is not a fused input"));
    indices.push_back(*index);
  }
  return Status::ok();
}

Status NpuflowEp::compile_program(const GraphView& view, const TensorProgram& claimed,
                                  const OrtNode* fused_node, OrtNodeComputeInfo** out) {
  auto program = std::make_shared<TensorProgram>(claimed);
  NPUFLOW_RETURN_IF_ERROR(load_program_constants(view, *program));
  std::vector<std::string> input_names;
  NPUFLOW_RETURN_IF_ERROR(fused_input_names(fused_node, input_names));
  ProgramNodeBinding binding;
  NPUFLOW_RETURN_IF_ERROR(bind_program_inputs(*program, input_names, binding.inputs));
  const OrtApi& ort = *api().ort;
  size_t count = 0;
  NPUFLOW_ORT_CHECK(ort.Node_GetNumOutputs(fused_node, &count));
  std::vector<const OrtValueInfo*> outputs(count);
  NPUFLOW_ORT_CHECK(ort.Node_GetOutputs(fused_node, outputs.data(), count));
  for (const OrtValueInfo* output : outputs) {
    const char* name = nullptr;
    NPUFLOW_ORT_CHECK(ort.GetValueInfoName(output, &name));
    std::optional<size_t> index = index_of(program->output_names, name ? name : "");
    if (!index) {
      return internal_error(
          str_cat("fused output '", name ? name : "?", "' is no output of its tensor program"));
    }
    binding.outputs.push_back(*index);
  }
  *out = new ProgramNodeCompute(std::move(program), std::move(binding));
  return Status::ok();
}

}  // namespace npuflow::ort
