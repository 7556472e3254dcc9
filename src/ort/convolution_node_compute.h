// The OrtNodeComputeInfo of one claimed Conv or ConvTranspose: reads the float input, allocates
// the output ONNX's attributes give it and runs the kernel (ops/Conv2d, ops/ConvTranspose2d). With
// a verifier, the same node built on the host device is the reference a ClaimVerifier checks the
// first run against.
#pragma once

#include <memory>

#include "core/strings.h"
#include "graph/graph_view.h"
#include "ort/fused_node_compute.h"
#include "ort/fused_node_inputs.h"
#include "route/claim_verifier.h"

namespace npuflow::ort {

// Kernel: output_shape(input shape), run(x, shape, y, exec), counters().device_calls.
template <typename Kernel>
class ConvolutionNodeCompute final : public FusedNodeCompute {
 public:
  // input_index: the position of the node's input among the fused node's inputs; what: the op
  // type, for errors.
  ConvolutionNodeCompute(std::shared_ptr<const Kernel> kernel, size_t input_index, const char* what,
                         std::shared_ptr<const ClaimVerifier> verifier = nullptr,
                         const Kernel* reference = nullptr)
      : kernel_(std::move(kernel)),
        input_index_(input_index),
        what_(what),
        verifier_(std::move(verifier)),
        reference_(reference) {}

 private:
  Status compute(OrtKernelContext* context) const override {
    auto input = read_input(context, input_index_, str_cat(what_, " input").c_str());
    if (!input.is_ok()) return input.status();
    const TypedInput& x = input.value();
    if (x.type != ElementType::kFloat32) {
      return invalid_argument(
          str_cat("the ", what_, " input is ", element_type_name(x.type), ", not float32"));
    }
    auto shape = kernel_->output_shape(x.shape);
    if (!shape.is_ok()) return shape.status();
    auto output = allocate_output(context, 0, shape.value());
    if (!output.is_ok()) return output.status();
    if (!output.value().read) return Status::ok();
    void* data = output.value().data;
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

  std::shared_ptr<const Kernel> kernel_;
  size_t input_index_;
  const char* what_;
  std::shared_ptr<const ClaimVerifier> verifier_;  // null: not verified
  const Kernel* reference_ = nullptr;
};

}  // namespace npuflow::ort
