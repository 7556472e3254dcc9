#include "ort/conv_transpose_node_compute.h"

#include "core/strings.h"
#include "graph/graph_view.h"
#include "ort/fused_node_inputs.h"

namespace npuflow::ort {

ConvTransposeNodeCompute::ConvTransposeNodeCompute(std::shared_ptr<const ConvTranspose2d> kernel,
                                                   size_t input_index,
                                                   std::shared_ptr<const ClaimVerifier> verifier,
                                                   const ConvTranspose2d* reference)
    : kernel_(std::move(kernel)),
      input_index_(input_index),
      verifier_(std::move(verifier)),
      reference_(reference) {}

Status ConvTransposeNodeCompute::compute(OrtKernelContext* context) const {
  const OrtApi& ort = *api().ort;
  auto input = read_input(context, input_index_, "ConvTranspose input");
  if (!input.is_ok()) return input.status();
  const TypedInput& x = input.value();
  if (x.type != ElementType::kFloat32) {
    return invalid_argument(
        str_cat("the ConvTranspose input is ", element_type_name(x.type), ", not float32"));
  }
  auto shape = kernel_->output_shape(x.shape);
  if (!shape.is_ok()) return shape.status();
  OrtValue* output = nullptr;
  NPUFLOW_ORT_CHECK(
      ort.KernelContext_GetOutput(context, 0, shape.value().data(), shape.value().size(), &output));
  void* data = nullptr;
  NPUFLOW_ORT_CHECK(ort.GetTensorMutableData(output, &data));
  const auto* in = static_cast<const float*>(x.data);
  const int64_t count = element_count(shape.value());
  const ExecContext exec = exec_context(context);
  if (!verifier_ || verifier_->state() == ClaimVerifier::State::kVerified || count == 0) {
    return kernel_->run(in, x.shape, static_cast<float*>(data), exec);
  }
  return verifier_->run(
      {NodeOutput{ElementType::kFloat32, data, count}},
      [&](const std::vector<NodeOutput>& to) -> Result<bool> {
        // Whether the device computed it: a run that fell back to the host proves nothing.
        const int64_t before = kernel_->counters().device_calls.load();
        NPUFLOW_RETURN_IF_ERROR(kernel_->run(in, x.shape, static_cast<float*>(to[0].data), exec));
        return kernel_->counters().device_calls.load() > before;
      },
      [&](const std::vector<NodeOutput>& to) {
        return reference_->run(in, x.shape, static_cast<float*>(to[0].data), exec);
      });
}

}  // namespace npuflow::ort
