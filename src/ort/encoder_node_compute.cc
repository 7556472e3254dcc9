#include "ort/encoder_node_compute.h"

#include "core/strings.h"
#include "graph/graph_view.h"
#include "ops/simd.h"

namespace npuflow::ort {
namespace {

Result<FloatInput> read_float(const OrtValue* value, const char* what) {
  const OrtApi& ort = *api().ort;
  if (value == nullptr) return invalid_argument(str_cat("the fused encoder received no ", what));
  OrtTensorTypeAndShapeInfo* info = nullptr;
  NPUFLOW_ORT_CHECK(ort.GetTensorTypeAndShape(value, &info));
  ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  size_t rank = 0;
  OrtStatus* status = ort.GetTensorElementType(info, &type);
  if (status == nullptr) status = ort.GetDimensionsCount(info, &rank);
  FloatInput in;
  in.shape.resize(rank);
  if (status == nullptr) status = ort.GetDimensions(info, in.shape.data(), rank);
  ort.ReleaseTensorTypeAndShapeInfo(info);
  NPUFLOW_ORT_CHECK(status);
  if (type != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT) {
    return invalid_argument(str_cat("the fused encoder's ", what, " is not float32"));
  }
  const void* data = nullptr;
  NPUFLOW_ORT_CHECK(ort.GetTensorData(value, &data));
  in.data = static_cast<const float*>(data);
  return in;
}

}  // namespace

EncoderNodeCompute::EncoderNodeCompute(std::shared_ptr<const VitEncoder> plan,
                                       EncoderNodeBinding binding)
    : plan_(std::move(plan)), binding_(std::move(binding)) {}

EncoderNodeCompute::EncoderNodeCompute(std::shared_ptr<const VitEncoder> plan,
                                       EncoderNodeBinding binding,
                                       std::shared_ptr<const ClaimVerifier> verifier,
                                       const VitEncoder* reference)
    : plan_(std::move(plan)),
      binding_(std::move(binding)),
      verifier_(std::move(verifier)),
      reference_(reference) {}

Status EncoderNodeCompute::run_plan(const VitEncoder& plan, const FloatInput& main,
                                    const std::vector<FloatInput>& side,
                                    const std::vector<NodeOutput>& outputs,
                                    const ExecContext& exec) const {
  std::vector<float*> exits(plan.exit_count(), nullptr);
  for (size_t i = 0; i < outputs.size(); ++i) {
    exits[static_cast<size_t>(binding_.output_exit[i])] = static_cast<float*>(outputs[i].data);
  }
  // Exits no fused output carries (none today) get scratch so the plan can write them.
  const int64_t count = outputs.empty() ? 0 : outputs[0].count;
  std::vector<std::vector<float>> spare;
  for (float*& exit : exits) {
    if (exit) continue;
    spare.emplace_back(static_cast<size_t>(count));
    exit = spare.back().data();
  }
  const ScopedPortableKernels kernels(binding_.portable_kernels);
  return plan.run(main, side, exits, exec);
}

Status EncoderNodeCompute::compute(OrtKernelContext* context) const {
  const OrtApi& ort = *api().ort;
  const OrtValue* value = nullptr;
  NPUFLOW_ORT_CHECK(ort.KernelContext_GetInput(context, binding_.main_input, &value));
  auto main = read_float(value, "main input");
  if (!main.is_ok()) return main.status();
  std::vector<FloatInput> side;
  for (size_t index : binding_.side_inputs) {
    NPUFLOW_ORT_CHECK(ort.KernelContext_GetInput(context, index, &value));
    auto in = read_float(value, "side input");
    if (!in.is_ok()) return in.status();
    side.push_back(std::move(in).value());
  }
  auto shape = plan_->output_shape(main.value(), side);
  if (!shape.is_ok()) return shape.status();
  const int64_t count = element_count(shape.value());
  std::vector<NodeOutput> outputs;
  for (size_t i = 0; i < binding_.output_exit.size(); ++i) {
    OrtValue* output = nullptr;
    NPUFLOW_ORT_CHECK(ort.KernelContext_GetOutput(context, i, shape.value().data(),
                                                  shape.value().size(), &output));
    void* data = nullptr;
    NPUFLOW_ORT_CHECK(ort.GetTensorMutableData(output, &data));
    outputs.push_back({ElementType::kFloat32, data, count});
  }
  const ExecContext exec = exec_context(context);
  if (!verifier_ || verifier_->state() == ClaimVerifier::State::kVerified || count == 0) {
    return run_plan(*plan_, main.value(), side, outputs, exec);
  }
  return verifier_->run(
      outputs,
      [&](const std::vector<NodeOutput>& to) -> Result<bool> {
        // The plan's projections run on the device (those it refuses fall back inside it).
        NPUFLOW_RETURN_IF_ERROR(run_plan(*plan_, main.value(), side, to, exec));
        return true;
      },
      [&](const std::vector<NodeOutput>& to) {
        return run_plan(*reference_, main.value(), side, to, exec);
      });
}

}  // namespace npuflow::ort
