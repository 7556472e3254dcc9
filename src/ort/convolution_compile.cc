// Compiling a claimed ConvTranspose: its weight and bias read from the fused subgraph's constants,
// its input found among the fused node's inputs by name, the kernel built on the device.
#include "core/strings.h"
#include "ort/conv_transpose_node_compute.h"
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

Status NpuflowEp::compile_conv_transpose(const GraphView& view, const ConvTransposeClaim& claim,
                                         const OrtNode* fused_node, OrtNodeComputeInfo** out) {
  const ConvTransposeSpec& spec = claim.spec;
  auto weight = float_constant(view, claim.weight, spec.ic * spec.oc * spec.kh * spec.kw);
  if (!weight.is_ok()) return weight.status();
  const float* bias = nullptr;
  if (!claim.bias.empty()) {
    auto b = float_constant(view, claim.bias, spec.oc);
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
  auto kernel = ConvTranspose2d::create(name, spec, weight.value(), bias, device_, logger_);
  if (!kernel.is_ok()) return kernel.status();
  std::shared_ptr<const ConvTranspose2d> shared = std::move(kernel).value();
  logger_.verbose(str_cat("compiled ", name, ": ConvTranspose ", spec.ic, "->", spec.oc, " ",
                          spec.kh, "x", spec.kw, " stride ", spec.stride_y, "x", spec.stride_x,
                          " on ", device_->name()));
  totals_->conv_transposes.push_back(shared);
  if (reference_device_) {
    auto reference = ConvTranspose2d::create(str_cat(name, "/reference"), spec, weight.value(),
                                             bias, reference_device_, logger_);
    if (!reference.is_ok()) return reference.status();
    std::shared_ptr<const ConvTranspose2d> ref = std::move(reference).value();
    const ConvTranspose2d* ref_kernel = ref.get();
    auto verifier = std::make_shared<const ClaimVerifier>(
        str_cat("ConvTranspose '", claim.output, "' (fused node '", name, "')"),
        ClaimGate::for_float_device(device_->float_compute_type()), logger_, std::move(ref));
    totals_->verifiers.push_back(verifier);
    *out = new ConvTransposeNodeCompute(std::move(shared), *input, std::move(verifier), ref_kernel);
    return Status::ok();
  }
  *out = new ConvTransposeNodeCompute(std::move(shared), *input);
  return Status::ok();
}

}  // namespace npuflow::ort
