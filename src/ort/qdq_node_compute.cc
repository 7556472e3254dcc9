#include "ort/qdq_node_compute.h"

#include <vector>

#include "core/strings.h"

namespace npuflow::ort {
namespace {

ElementType from_onnx_8bit_or_float(ONNXTensorElementDataType type) {
  switch (type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8:
      return ElementType::kInt8;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8:
      return ElementType::kUInt8;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT:
      return ElementType::kFloat32;
    default:
      return ElementType::kUnknown;
  }
}

}  // namespace

QdqNodeCompute::QdqNodeCompute(std::shared_ptr<const QdqMatMul> kernel, QdqNodeBinding binding)
    : kernel_(std::move(kernel)), binding_(binding) {}

Status QdqNodeCompute::compute(OrtKernelContext* context) const {
  const OrtApi& ort = *api().ort;
  const QdqGemmSpec& spec = kernel_->spec();

  const OrtValue* input = nullptr;
  NPUFLOW_ORT_CHECK(ort.KernelContext_GetInput(context, binding_.activation_input, &input));
  if (input == nullptr) return invalid_argument("the fused QDQ MatMul received no activation");
  OrtTensorTypeAndShapeInfo* info = nullptr;
  NPUFLOW_ORT_CHECK(ort.GetTensorTypeAndShape(input, &info));
  ONNXTensorElementDataType onnx_type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  size_t rank = 0;
  OrtStatus* status = ort.GetTensorElementType(info, &onnx_type);
  if (status == nullptr) status = ort.GetDimensionsCount(info, &rank);
  std::vector<int64_t> dims(rank);
  if (status == nullptr) status = ort.GetDimensions(info, dims.data(), rank);
  ort.ReleaseTensorTypeAndShapeInfo(info);
  NPUFLOW_ORT_CHECK(status);

  const ElementType type = from_onnx_8bit_or_float(onnx_type);
  const ElementType expected =
      binding_.activation_dequantized ? ElementType::kFloat32 : binding_.activation_type;
  if (type != expected) {
    return invalid_argument(str_cat("activation is ", element_type_name(type), ", expected ",
                                    element_type_name(expected)));
  }
  if (rank < 2 || dims.back() != spec.k) {
    return invalid_argument(
        str_cat("activation shape ", shape_string(dims), " does not end in K=", spec.k));
  }
  int64_t m = 1;
  for (size_t i = 0; i + 1 < rank; ++i) m *= dims[i];
  dims.back() = spec.n;

  OrtValue* output = nullptr;
  NPUFLOW_ORT_CHECK(ort.KernelContext_GetOutput(context, 0, dims.data(), dims.size(), &output));
  // A group whose result nothing reads (a dead QuantizeLinear) leaves the fused node without an
  // output: ONNX Runtime hands out no tensor, and there is nothing to compute.
  if (output == nullptr || m == 0) return Status::ok();
  void* out = nullptr;
  NPUFLOW_ORT_CHECK(ort.GetTensorMutableData(output, &out));
  const void* a = nullptr;
  NPUFLOW_ORT_CHECK(ort.GetTensorData(input, &a));
  // Lend the session's intra-op thread pool to the device.
  const ExecContext exec = exec_context(context);
  if (binding_.activation_dequantized) {
    return kernel_->run_from_dequantized(static_cast<const float*>(a), binding_.activation_type, m,
                                         out, exec);
  }
  return kernel_->run(a, binding_.activation_type, m, out, exec);
}

}  // namespace npuflow::ort
