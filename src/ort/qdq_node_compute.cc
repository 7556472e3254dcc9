#include "ort/qdq_node_compute.h"

#include <vector>

#include "core/strings.h"
#include "graph/graph_view.h"
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
                                  const ExecContext& exec, const RowQuantization* rows) const {
  if (binding_.activation_dequantized) {
    return kernel.run_from_dequantized(static_cast<const float*>(a), binding_.activation_type, m,
                                       out, exec, rows);
  }
  return kernel.run(a, binding_.activation_type, m, out, exec, rows);
}

Status QdqNodeCompute::row_quantization(OrtKernelContext* context, const std::vector<int64_t>& dims,
                                        RowQuantizationBuffers& out) const {
  std::vector<float> scales = binding_.x_scales;
  std::vector<int32_t> zero_points = binding_.x_zero_points;
  if (binding_.x_scale_input >= 0) {
    auto in = read_input(context, static_cast<size_t>(binding_.x_scale_input), "activation scale");
    if (!in.is_ok()) return in.status();
    if (in.value().type != ElementType::kFloat32)
      return invalid_argument("the activation scale is not float32");
    const auto* p = static_cast<const float*>(in.value().data);
    scales.assign(p, p + element_count(in.value().shape));
  }
  if (binding_.x_zero_point_input >= 0) {
    auto in = read_input(context, static_cast<size_t>(binding_.x_zero_point_input),
                         "activation zero point");
    if (!in.is_ok()) return in.status();
    if (in.value().type != binding_.activation_type)
      return invalid_argument("the activation zero point's type is not the activation's");
    const int64_t count = element_count(in.value().shape);
    zero_points.resize(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      zero_points[static_cast<size_t>(i)] = binding_.activation_type == ElementType::kUInt8
                                                ? static_cast<const uint8_t*>(in.value().data)[i]
                                                : static_cast<const int8_t*>(in.value().data)[i];
    }
  }
  // A scalar runtime scale is per tensor: any leading axis reads it alike.
  const int64_t axis = scales.size() == 1 && zero_points.size() == 1 ? 0 : binding_.x_axis;
  return expand_row_quantization(dims, axis, scales, zero_points, out);
}

Status QdqNodeCompute::compute(OrtKernelContext* context) const {
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
  thread_local RowQuantizationBuffers row_buffers;
  RowQuantization rows_view;
  const RowQuantization* rows = nullptr;
  if (spec.x_per_row) {
    NPUFLOW_RETURN_IF_ERROR(row_quantization(context, dims, row_buffers));
    rows_view = row_buffers.view();
    rows = &rows_view;
  }
  dims.back() = spec.n;

  auto output = allocate_output(context, 0, dims);
  if (!output.is_ok()) return output.status();
  if (!output.value().read || m == 0) return Status::ok();
  void* out = output.value().data;
  const void* a = input.value().data;
  // Lend the session's intra-op thread pool to the device.
  const ExecContext exec = exec_context(context);
  if (!verifier_ || verifier_->state() == ClaimVerifier::State::kVerified ||
      !kernel_->on_device() || m < binding_.min_rows) {
    // Unverified, verified already, or this run takes the host loop anyway (the reference's own
    // arithmetic): the plain path, which allocates nothing.
    return run_kernel(*kernel_, a, m, out, exec, rows);
  }
  const ElementType out_type = spec.output ? spec.output->type : ElementType::kFloat32;
  const std::vector<NodeOutput> outputs = {{out_type, out, m * spec.n}};
  return verifier_->run(
      outputs,
      [&](const std::vector<NodeOutput>& to) -> Result<bool> {
        // While the node is pending only the checking run calls the device through this
        // kernel (smaller runs take the host loop), so a change in its device count is ours.
        const int64_t before = kernel_->counters().device_calls.load();
        NPUFLOW_RETURN_IF_ERROR(run_kernel(*kernel_, a, m, to[0].data, exec, rows));
        return kernel_->counters().device_calls.load() > before;
      },
      [&](const std::vector<NodeOutput>& to) {
        return run_kernel(*reference_, a, m, to[0].data, exec, rows);
      });
}

}  // namespace npuflow::ort
