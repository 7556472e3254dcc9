#include "ort/program_node_compute.h"

#include <cstring>

#include "core/strings.h"
#include "ort/fused_node_inputs.h"

namespace npuflow::ort {

ProgramNodeCompute::ProgramNodeCompute(std::shared_ptr<const TensorProgram> program,
                                       ProgramNodeBinding binding)
    : program_(std::move(program)), binding_(std::move(binding)) {}

Status ProgramNodeCompute::compute(OrtKernelContext* context) const {
  std::vector<TypedInput> typed;
  for (size_t index : binding_.inputs) {
    auto in = read_input(context, index, "program input");
    if (!in.is_ok()) return in.status();
    typed.push_back(std::move(in).value());
  }
  std::vector<TensorView> views;
  for (const TypedInput& t : typed) views.push_back({t.type, &t.shape, t.data});
  auto result = program_->run(views);
  if (!result.is_ok()) return result.status();
  for (size_t i = 0; i < binding_.outputs.size(); ++i) {
    const ProgramTensor& t = result.value().output(binding_.outputs[i], program_->output_slots);
    auto output = allocate_output(context, i, t.shape());
    if (!output.is_ok()) return output.status();
    if (!output.value().read) continue;
    if (output.value().type != t.type()) {
      return internal_error(str_cat("tensor program output ", i, " is ",
                                    element_type_name(t.type()), ", the graph says otherwise"));
    }
    if (t.bytes()) std::memcpy(output.value().data, t.raw(), t.bytes());
  }
  return Status::ok();
}

}  // namespace npuflow::ort
