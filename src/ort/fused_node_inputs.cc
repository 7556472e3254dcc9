#include "ort/fused_node_inputs.h"

#include "core/strings.h"

namespace npuflow::ort {

Status fused_input_names(const OrtNode* node, std::vector<std::string>& names) {
  const OrtApi& ort = *api().ort;
  size_t count = 0;
  NPUFLOW_ORT_CHECK(ort.Node_GetNumInputs(node, &count));
  std::vector<const OrtValueInfo*> inputs(count);
  NPUFLOW_ORT_CHECK(ort.Node_GetInputs(node, inputs.data(), count));
  names.assign(count, "");
  for (size_t i = 0; i < count; ++i) {
    const char* name = nullptr;
    if (inputs[i] == nullptr) continue;
    if (OrtStatus* status = ort.GetValueInfoName(inputs[i], &name)) {
      ort.ReleaseStatus(status);
      continue;
    }
    if (name) names[i] = name;
  }
  return Status::ok();
}

std::optional<size_t> index_of(const std::vector<std::string>& names, const std::string& name) {
  for (size_t i = 0; i < names.size(); ++i)
    if (!names[i].empty() && names[i] == name) return i;
  return std::nullopt;
}

Result<TypedInput> read_input(OrtKernelContext* context, size_t index, const char* what) {
  const OrtApi& ort = *api().ort;
  const OrtValue* value = nullptr;
  NPUFLOW_ORT_CHECK(ort.KernelContext_GetInput(context, index, &value));
  if (value == nullptr) return invalid_argument(str_cat("the fused node received no ", what));
  OrtTensorTypeAndShapeInfo* info = nullptr;
  NPUFLOW_ORT_CHECK(ort.GetTensorTypeAndShape(value, &info));
  ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  size_t rank = 0;
  OrtStatus* status = ort.GetTensorElementType(info, &type);
  if (status == nullptr) status = ort.GetDimensionsCount(info, &rank);
  TypedInput in;
  in.shape.resize(rank);
  if (status == nullptr) status = ort.GetDimensions(info, in.shape.data(), rank);
  ort.ReleaseTensorTypeAndShapeInfo(info);
  NPUFLOW_ORT_CHECK(status);
  in.type = element_type_of(type);
  NPUFLOW_ORT_CHECK(ort.GetTensorData(value, &in.data));
  return in;
}

Result<OutputTensor> allocate_output(OrtKernelContext* context, size_t index,
                                     std::span<const int64_t> shape) {
  const OrtApi& ort = *api().ort;
  OrtValue* value = nullptr;
  NPUFLOW_ORT_CHECK(
      ort.KernelContext_GetOutput(context, index, shape.data(), shape.size(), &value));
  OutputTensor out;
  if (value == nullptr) return out;
  OrtTensorTypeAndShapeInfo* info = nullptr;
  NPUFLOW_ORT_CHECK(ort.GetTensorTypeAndShape(value, &info));
  ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  OrtStatus* status = ort.GetTensorElementType(info, &type);
  ort.ReleaseTensorTypeAndShapeInfo(info);
  NPUFLOW_ORT_CHECK(status);
  NPUFLOW_ORT_CHECK(ort.GetTensorMutableData(value, &out.data));
  out.read = true;
  out.type = element_type_of(type);
  return out;
}

}  // namespace npuflow::ort
