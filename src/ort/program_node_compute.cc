#include "ort/program_node_compute.h"

#include <cstring>

#include "core/strings.h"
#include "ort/fused_node_inputs.h"

namespace npuflow::ort {

ProgramNodeCompute::ProgramNodeCompute(std::shared_ptr<const TensorProgram> program,
                                       ProgramNodeBinding binding)
    : program_(std::move(program)), binding_(std::move(binding)) {}

Status ProgramNodeCompute::compute(OrtKernelContext* context) const {
  const OrtApi& ort = *api().ort;
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
    OrtValue* output = nullptr;
    NPUFLOW_ORT_CHECK(
        ort.KernelContext_GetOutput(context, i, t.shape().data(), t.shape().size(), &output));
    OrtTensorTypeAndShapeInfo* info = nullptr;
    NPUFLOW_ORT_CHECK(ort.GetTensorTypeAndShape(output, &info));
    ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    OrtStatus* status = ort.GetTensorElementType(info, &type);
    ort.ReleaseTensorTypeAndShapeInfo(info);
    NPUFLOW_ORT_CHECK(status);
    if (element_type_of(type) != t.type()) {
      return internal_error(str_cat("tensor program output ", i, " is ",
                                    element_type_name(t.type()), ", the graph says otherwise"));
    }
    void* data = nullptr;
    NPUFLOW_ORT_CHECK(ort.GetTensorMutableData(output, &data));
    if (t.bytes()) std::memcpy(data, t.raw(), t.bytes());
  }
  return Status::ok();
}

}  // namespace npuflow::ort
