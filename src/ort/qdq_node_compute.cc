#include "ort/qdq_node_compute.h"

#include <vector>

#include "core/strings.h"
#include "ort/fused_node_inputs.h"

namespace npuflow::ort {

QdqNodeCompute::QdqNodeCompute(std::shared_ptr<const QdqMatMul> kernel, QdqNodeBinding binding)
    : kernel_(std::move(kernel)), binding_(binding) {}

QdqNodeCompute::QdqNodeCompute(std::shared_ptr<const QdqMatMul> kernel, QdqNodeBinding binding,
                               std::shared_ptr<const ClaimVerifier> verifier,
                               const QdqMatMul* reference)
    : kernel_(std::move(kernel)),
      binding_(binding),
      verifier_(std::move(verifier)),
      reference_(reference) {}

Status QdqNodeCompute::run_kernel(const QdqMatMul& kernel, const void* a, int64_t m, void* out,
                                  const ExecContext& exec) const {
  if (binding_.activation_dequantized) {
    return kernel.run_from_dequantized(static_cast<const float*>(a), binding_.activation_type, m,
                                       out, exec);
  }
  return kernel.run(a, binding_.activation_type, m, out, exec);
}

Status QdqNodeCompute::compute(OrtKernelContext* context) const {
  const OrtApi& ort = *api().ort;
  const QdqGemmSpec& spec = kernel_->spec();

  auto input = read_input(context, binding_.activation_input, "activation");
  if (!input.is_ok()) return input.status();
  std::vector<int64_t> dims = input.value().shape;
  const size_t rank = dims.size();
  const ElementType type = input.value().type;
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
  const void* a = input.value().data;
  // Lend the session's intra-op thread pool to the device.
  const ExecContext exec = exec_context(context);
  if (!verifier_ || verifier_->state() == ClaimVerifier::State::kVerified ||
      !kernel_->on_device() || m < binding_.min_rows) {
    // Unverified, verified already, or this run takes the host loop anyway (the reference's own
    // arithmetic): the plain path, which allocates nothing.
    return run_kernel(*kernel_, a, m, out, exec);
  }
  const ElementType out_type = spec.output ? spec.output->type : ElementType::kFloat32;
  const std::vector<NodeOutput> outputs = {{out_type, out, m * spec.n}};
  return verifier_->run(
      outputs,
      [&](const std::vector<NodeOutput>& to) -> Result<bool> {
        // While the node is pending only the checking run calls the device through this
        // kernel (smaller runs take the host loop), so a change in its device count is ours.
        const int64_t before = kernel_->counters().device_calls.load();
        NPUFLOW_RETURN_IF_ERROR(run_kernel(*kernel_, a, m, to[0].data, exec));
        return kernel_->counters().device_calls.load() > before;
      },
      [&](const std::vector<NodeOutput>& to) {
        return run_kernel(*reference_, a, m, to[0].data, exec);
      });
}

}  // namespace npuflow::ort
