// Compiling the claimed MatMul groups: a QDQ group (its int8 weight, its activation and per-row
// scale inputs bound by name) and an integer group (MatMulInteger, QLinearMatMul, or a float
// MatMul taken as int8 with its weight quantized here), each verified bit for bit against the
// same group on the host under `verify`.
#include "core/strings.h"
#include "ort/ep_totals.h"
#include "ort/fused_node_inputs.h"
#include "ort/integer_node_compute.h"
#include "ort/npuflow_ep.h"
#include "ort/qdq_node_compute.h"
#include "quant/symmetric_quantization.h"
#include "route/matmul_route.h"

namespace npuflow::ort {
namespace {

// A claim's constant 8-bit K x N weight, checked against the size the claim says.
Result<const ConstantData*> quantized_weight(const GraphView& view, const std::string& name,
                                             int64_t k, int64_t n) {
  const ValueId id = view.find_value(name);
  if (!view.is_constant(id)) {
    return internal_error(str_cat("weight '", name, "' is missing at compile time"));
  }
  const ConstantData* weight = &*view.value(id).constant;
  if (weight->bytes != static_cast<size_t>(k * n)) {
    return invalid_argument(str_cat("weight '", name, "' holds ", weight->bytes, " bytes for a ", k,
                                    "x", n, " matrix"));
  }
  return weight;
}

}  // namespace

Status NpuflowEp::compile_qdq(const GraphView& view, const QdqMatMulClaim& claim,
                              const OrtNode* fused_node, OrtNodeComputeInfo** out) {
  auto weight_ref = quantized_weight(view, claim.weight_name, claim.spec.k, claim.spec.n);
  if (!weight_ref.is_ok()) return weight_ref.status();
  const ConstantData& weight = *weight_ref.value();

  // Locate the activation among the fused node's inputs.
  const OrtApi& ort = *api().ort;
  std::vector<std::string> input_names;
  NPUFLOW_RETURN_IF_ERROR(fused_input_names(fused_node, input_names));
  QdqNodeBinding binding;
  binding.activation_type = claim.activation_type;
  binding.activation_dequantized = claim.activation_dequantized;
  const auto activation = index_of(input_names, claim.activation_name);
  if (!activation) {
    return internal_error(
        str_cat("activation '", claim.activation_name, "' is not an input of the fused node"));
  }
  binding.activation_input = *activation;
  if (claim.spec.x_per_row) {
    binding.x_axis = claim.x_axis;
    binding.x_scales = claim.x_row_scales;
    binding.x_zero_points = claim.x_row_zero_points;
    for (auto [name, index] : {std::pair{&claim.x_scale_input, &binding.x_scale_input},
                               std::pair{&claim.x_zero_point_input, &binding.x_zero_point_input}}) {
      if (name->empty()) continue;
      const auto at = index_of(input_names, *name);
      if (!at) return internal_error(str_cat("'", *name, "' is not an input of the fused node"));
      *index = static_cast<int64_t>(*at);
    }
  }

  binding.min_rows = integer_min_rows(device_->name(), knobs_.integer("min_rows"));

  const char* fused_name = nullptr;
  NPUFLOW_ORT_CHECK(ort.Node_GetName(fused_node, &fused_name));
  auto kernel =
      QdqMatMul::create(fused_name ? fused_name : claim.matmul_output, claim.spec, weight.data,
                        claim.weight_type, device_, binding.min_rows, logger_);
  if (!kernel.is_ok()) return kernel.status();
  std::shared_ptr<const QdqMatMul> shared = std::move(kernel).value();
  logger_.verbose(str_cat("compiled ", fused_name ? fused_name : "?", ": k=", claim.spec.k,
                          " n=", claim.spec.n, " weight scales=", claim.spec.w_scales.size(),
                          " zp_x=", claim.spec.x_zero_point, " resident=", shared->resident_bytes(),
                          " bytes"));
  totals_->kernels.push_back(shared);
  if (reference_device_) {
    // The same group on the host: exact integers, the answer the device must give bit for bit.
    auto reference = QdqMatMul::create(str_cat(fused_name ? fused_name : "", "/reference"),
                                       claim.spec, weight.data, claim.weight_type,
                                       reference_device_, binding.min_rows, logger_);
    if (!reference.is_ok()) return reference.status();
    std::shared_ptr<const QdqMatMul> ref = std::move(reference).value();
    const QdqMatMul* ref_plan = ref.get();
    auto verifier = std::make_shared<const ClaimVerifier>(
        str_cat("QDQ MatMul '", claim.matmul_output, "' (fused node '",
                fused_name ? fused_name : "?", "')"),
        ClaimGate::bit_exact(), logger_, std::move(ref));
    totals_->verifiers.push_back(verifier);
    *out = new QdqNodeCompute(std::move(shared), binding, std::move(verifier), ref_plan);
    return Status::ok();
  }
  *out = new QdqNodeCompute(std::move(shared), binding);
  return Status::ok();
}

Status NpuflowEp::compile_integer(const GraphView& view, const IntegerMatMulClaim& original,
                                  const OrtNode* fused_node, OrtNodeComputeInfo** out) {
  IntegerMatMulClaim claim = original;
  const void* weight_data = nullptr;
  SymmetricColumns quantized;  // a float weight, quantized here once
  if (claim.quantize_rows) {
    const ValueId id = view.find_value(claim.weight_name);
    if (!view.is_constant(id) ||
        view.value(id).constant->bytes != static_cast<size_t>(claim.spec.k * claim.spec.n) * 4) {
      return internal_error(str_cat("weight '", claim.weight_name, "' is not the claimed one"));
    }
    quantized = quantize_columns_symmetric(static_cast<const float*>(view.value(id).constant->data),
                                           claim.spec.k, claim.spec.n);
    claim.spec.w_scales = quantized.scales;
    claim.weight_type = ElementType::kInt8;
    weight_data = quantized.values.data();
  } else {
    auto weight_ref = quantized_weight(view, claim.weight_name, claim.spec.k, claim.spec.n);
    if (!weight_ref.is_ok()) return weight_ref.status();
    weight_data = weight_ref.value()->data;
  }
  const OrtApi& ort = *api().ort;
  std::vector<std::string> input_names;
  NPUFLOW_RETURN_IF_ERROR(fused_input_names(fused_node, input_names));
  auto input_index = [&](const std::string& name) -> int64_t {
    const auto index = index_of(input_names, name);
    return index ? static_cast<int64_t>(*index) : -1;
  };
  IntegerNodeBinding binding;
  binding.quantize_inside = claim.quantize_inside;
  binding.quantize_rows = claim.quantize_rows;
  binding.activation_type = claim.activation_type;
  binding.zero_point = claim.activation_zero_point;
  const int64_t activation = input_index(claim.activation_name);
  if (activation < 0) {
    return internal_error(
        str_cat("activation '", claim.activation_name, "' is not an input of the fused node"));
  }
  binding.activation_input = static_cast<size_t>(activation);
  for (auto [name, index] :
       {std::pair{&claim.activation_zero_point_name, &binding.zero_point_input},
        std::pair{&claim.activation_scale_name, &binding.scale_input}}) {
    if (name->empty()) continue;
    *index = input_index(*name);
    if (*index < 0) return internal_error(str_cat("'", *name, "' is not a fused node input"));
  }
  binding.min_rows = integer_min_rows(device_->name(), knobs_.integer("min_rows"));
  const char* fused_name = nullptr;
  NPUFLOW_ORT_CHECK(ort.Node_GetName(fused_node, &fused_name));
  auto kernel =
      IntegerMatMul::create(fused_name ? fused_name : claim.matmul_output, claim.spec, weight_data,
                            claim.weight_type, device_, binding.min_rows, logger_);
  if (!kernel.is_ok()) return kernel.status();
  std::shared_ptr<const IntegerMatMul> shared = std::move(kernel).value();
  logger_.verbose(str_cat("compiled ", fused_name ? fused_name : "?", ": integer k=", claim.spec.k,
                          " n=", claim.spec.n, claim.quantize_inside ? " dynamic" : "",
                          claim.quantize_rows ? " float-as-int8" : "",
                          claim.spec.float_output ? " float" : " int32",
                          " out, resident=", shared->resident_bytes(), " bytes"));
  totals_->integer_kernels.push_back(shared);
  if (reference_device_ && claim.spec.float_output) {
    // The same group on the host: exact integers and the same fp32 epilogue, bit for bit.
    auto reference = IntegerMatMul::create(str_cat(fused_name ? fused_name : "", "/reference"),
                                           claim.spec, weight_data, claim.weight_type,
                                           reference_device_, binding.min_rows, logger_);
    if (!reference.is_ok()) return reference.status();
    std::shared_ptr<const IntegerMatMul> ref = std::move(reference).value();
    const IntegerMatMul* ref_plan = ref.get();
    auto verifier = std::make_shared<const ClaimVerifier>(
        str_cat("integer MatMul '", claim.matmul_output, "' (fused node '",
                fused_name ? fused_name : "?", "')"),
        ClaimGate::bit_exact(), logger_, std::move(ref));
    totals_->verifiers.push_back(verifier);
    *out = new IntegerNodeCompute(std::move(shared), binding, std::move(verifier), ref_plan);
    return Status::ok();
  }
  *out = new IntegerNodeCompute(std::move(shared), binding);
  return Status::ok();
}

}  // namespace npuflow::ort
