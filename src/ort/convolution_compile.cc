// Compiling a claimed Conv or ConvTranspose: its weight and bias read from the fused subgraph's
// constants, its input found among the fused node's inputs by name, the kernel built on the
// device (and on the host as the verifier's reference).
#include <type_traits>

#include "core/strings.h"
#include "ort/convolution_node_compute.h"
#include "ort/ep_totals.h"
#include "ort/fused_node_inputs.h"
#include "ort/npuflow_ep.h"

namespace npuflow::ort {
namespace {

// A constant fp32 initializer of exactly `count` values, by name.
Result<const float*> float_constant(const GraphView& view, const std::string& name, int64_t count) {
  const ValueId id = view.find_value(name);
  if (!view.is_constant(id) || view.value(id).type != ElementType::kFloat32 ||
      view.value(id).constant->bytes != static_cast<size_t>(count) * sizeof(float)) {
    return internal_error(str_cat("constant '", name, "' is not the claimed one at compile time"));
  }
  return static_cast<const float*>(view.value(id).constant->data);
}

}  // namespace

// Kernel::create(name, spec, weight, bias, device, logger); `kept` holds the session's kernels of
// this kind for its summary.
template <typename Kernel, typename ClaimT>
Status NpuflowEp::compile_convolution(const GraphView& view, const ClaimT& claim, const char* what,
                                      int64_t weight_count, int64_t out_channels,
                                      std::vector<std::shared_ptr<const Kernel>>& kept,
                                      const OrtNode* fused_node, OrtNodeComputeInfo** out) {
  auto weight = float_constant(view, claim.weight, weight_count);
  if (!weight.is_ok()) return weight.status();
  const float* bias = nullptr;
  if (!claim.bias.empty()) {
    auto b = float_constant(view, claim.bias, out_channels);
    if (!b.is_ok()) return b.status();
    bias = b.value();
  }
  std::vector<std::string> input_names;
  NPUFLOW_RETURN_IF_ERROR(fused_input_names(fused_node, input_names));
  const auto input = index_of(input_names, claim.input);
  if (!input) {
    return internal_error(str_cat("'", claim.input, "' is not an input of the fused node"));
  }
  const char* fused_name = nullptr;
  NPUFLOW_ORT_CHECK(api().ort->Node_GetName(fused_node, &fused_name));
  const std::string name = fused_name ? fused_name : claim.output;
  const auto& s = claim.spec;
  auto kernel = [&] {
    // A Conv's fp32 path is oneDNN's convolution primitive, not a GEMM on a host device.
    if constexpr (std::is_same_v<Kernel, ConvTranspose2d>) {
      return Kernel::create(name, s, weight.value(), bias, device_, logger_, host_);
    } else {
      return Kernel::create(name, s, weight.value(), bias, device_, logger_);
    }
  }();
  if (!kernel.is_ok()) return kernel.status();
  std::shared_ptr<const Kernel> shared = std::move(kernel).value();
  logger_.verbose(str_cat("compiled ", name, ": ", what, " ", s.ic, "->", s.oc, " ", s.kh, "x",
                          s.kw, " stride ", s.stride_y, "x", s.stride_x, " on ", device_->name()));
  kept.push_back(shared);
  if (reference_device_) {
    auto reference = Kernel::create(str_cat(name, "/reference"), s, weight.value(), bias,
                                    reference_device_, logger_);
    if (!reference.is_ok()) return reference.status();
    std::shared_ptr<const Kernel> ref = std::move(reference).value();
    const Kernel* ref_kernel = ref.get();
    auto verifier = std::make_shared<const ClaimVerifier>(
        str_cat(what, " '", claim.output, "' (fused node '", name, "')"),
        ClaimGate::for_float_device(device_->float_compute_type()), logger_, std::move(ref));
    totals_->verifiers.push_back(verifier);
    *out = new ConvolutionNodeCompute<Kernel>(std::move(shared), *input, what, std::move(verifier),
                                              ref_kernel);
    return Status::ok();
  }
  *out = new ConvolutionNodeCompute<Kernel>(std::move(shared), *input, what);
  return Status::ok();
}

Status NpuflowEp::compile_conv_transpose(const GraphView& view, const ConvTransposeClaim& claim,
                                         const OrtNode* fused_node, OrtNodeComputeInfo** out) {
  const ConvTransposeSpec& s = claim.spec;
  return compile_convolution<ConvTranspose2d>(view, claim, "ConvTranspose",
                                              s.ic * s.oc * s.kh * s.kw, s.oc,
                                              totals_->conv_transposes, fused_node, out);
}

Status NpuflowEp::compile_conv(const GraphView& view, const ConvClaim& claim,
                               const OrtNode* fused_node, OrtNodeComputeInfo** out) {
  const ConvSpec& s = claim.spec;
  return compile_convolution<Conv2d>(view, claim, "Conv", s.ic * s.oc * s.kh * s.kw, s.oc,
                                     totals_->convs, fused_node, out);
}

}  // namespace npuflow::ort
