#include "ort/integer_node_compute.h"

#include <vector>

#include "core/strings.h"
#include "graph/graph_view.h"
#include "ort/fused_node_inputs.h"

namespace npuflow::ort {
namespace {

// A one-element runtime input (a DynamicQuantizeLinear's scale or zero point).
Result<const void*> scalar_input(OrtKernelContext* context, int64_t index, ElementType type) {
  auto in = read_input(context, static_cast<size_t>(index), "scale or zero point");
  if (!in.is_ok()) return in.status();
  if (in.value().type != type || element_count(in.value().shape) != 1) {
    return invalid_argument(
        str_cat("a scale or zero point input has shape ", shape_string(in.value().shape)));
  }
  return in.value().data;
}

}  // namespace

IntegerNodeCompute::IntegerNodeCompute(std::shared_ptr<const IntegerMatMul> kernel,
                                       IntegerNodeBinding binding)
    : kernel_(std::move(kernel)), binding_(binding) {}

IntegerNodeCompute::IntegerNodeCompute(std::shared_ptr<const IntegerMatMul> kernel,
                                       IntegerNodeBinding binding,
                                       std::shared_ptr<const ClaimVerifier> verifier,
                                       const IntegerMatMul* reference)
    : kernel_(std::move(kernel)),
      binding_(binding),
      verifier_(std::move(verifier)),
      reference_(reference) {}

Status IntegerNodeCompute::run_kernel(const IntegerMatMul& kernel, const void* a,
                                      int32_t zero_point, float scale, int64_t m, void* out,
                                      const ExecContext& exec) const {
  if (binding_.quantize_rows) {
    return kernel.run_rows(static_cast<const float*>(a), m, static_cast<float*>(out), exec);
  }
  if (binding_.quantize_inside) {
    return kernel.run_dynamic(static_cast<const float*>(a), m, static_cast<float*>(out), exec);
  }
  return kernel.run(a, binding_.activation_type, zero_point, scale, m, out, exec);
}

Status IntegerNodeCompute::compute(OrtKernelContext* context) const {
  const IntegerMatMulSpec& spec = kernel_->spec();
  auto input = read_input(context, binding_.activation_input, "activation");
  if (!input.is_ok()) return input.status();
  std::vector<int64_t> dims = input.value().shape;
  const ElementType expected =
      binding_.quantize_inside || binding_.quantize_rows ? ElementType::kFloat32
      : binding_.activation_type == ElementType::kUInt8  ? ElementType::kUInt8
                                                         : ElementType::kInt8;
  if (input.value().type != expected) {
    return invalid_argument("the activation of a fused integer MatMul has an unexpected type");
  }
  if (dims.empty() || dims.back() != spec.k) {
    return invalid_argument(
        str_cat("activation shape ", shape_string(dims), " does not end in K=", spec.k));
  }
  int64_t m = 1;
  for (size_t i = 0; i + 1 < dims.size(); ++i) m *= dims[i];
  dims.back() = spec.n;

  int32_t zero_point = binding_.zero_point;
  float scale = 1.0f;
  if (binding_.zero_point_input >= 0) {
    auto zp = scalar_input(context, binding_.zero_point_input, binding_.activation_type);
    if (!zp.is_ok()) return zp.status();
    zero_point = binding_.activation_type == ElementType::kUInt8
                     ? *static_cast<const uint8_t*>(zp.value())
                     : *static_cast<const int8_t*>(zp.value());
  }
  if (binding_.scale_input >= 0) {
    auto s = scalar_input(context, binding_.scale_input, ElementType::kFloat32);
    if (!s.is_ok()) return s.status();
    scale = *static_cast<const float*>(s.value());
  }

  auto output = allocate_output(context, 0, dims);
  if (!output.is_ok()) return output.status();
  if (!output.value().read || m == 0) return Status::ok();
  void* out = output.value().data;
  const void* a = input.value().data;
  const ExecContext exec = exec_context(context);
  if (!verifier_ || verifier_->state() == ClaimVerifier::State::kVerified ||
      !kernel_->on_device() || m < binding_.min_rows) {
    return run_kernel(*kernel_, a, zero_point, scale, m, out, exec);
  }
  const std::vector<NodeOutput> outputs = {{ElementType::kFloat32, out, m * spec.n}};
  return verifier_->run(
      outputs,
      [&](const std::vector<NodeOutput>& to) -> Result<bool> {
        // While pending only the checking run reaches the device through this kernel.
        const int64_t before = kernel_->counters().device_calls.load();
        NPUFLOW_RETURN_IF_ERROR(run_kernel(*kernel_, a, zero_point, scale, m, to[0].data, exec));
        return kernel_->counters().device_calls.load() > before;
      },
      [&](const std::vector<NodeOutput>& to) {
        return run_kernel(*reference_, a, zero_point, scale, m, to[0].data, exec);
      });
}

}  // namespace npuflow::ort
