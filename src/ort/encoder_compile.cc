// Compiling a claimed encoder: its weights read from the fused subgraph's constants, its side
// inputs bound to the fused node's inputs by name, and the resident plan built on the device.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/strings.h"
#include "ops/rotary.h"
#include "ort/encoder_node_compute.h"
#include "ort/ep_totals.h"
#include "ort/fused_node_inputs.h"
#include "ort/npuflow_ep.h"
#include "ort/program_node_compute.h"
#include "route/attention_route.h"

namespace npuflow::ort {

namespace {

// Reads a constant fp32 initializer of the fused subgraph by name.
Result<FloatRef> constant_ref(const GraphView& view, const std::string& name) {
  const ValueId id = view.find_value(name);
  if (!view.is_constant(id) || view.value(id).type != ElementType::kFloat32) {
    return internal_error(str_cat("constant '", name, "' is missing at compile time"));
  }
  const ValueInfo& v = view.value(id);
  FloatRef ref{static_cast<const float*>(v.constant->data), v.shape};
  if (static_cast<size_t>(ref.count()) * sizeof(float) != v.constant->bytes) {
    return internal_error(str_cat("constant '", name, "' has ", v.constant->bytes,
                                  " bytes for shape ", shape_string(v.shape)));
  }
  return ref;
}

}  // namespace

Status NpuflowEp::compile_encoder(const GraphView& view, const VisionEncoderClaim& claim,
                                  const OrtNode* fused_node, OrtNodeComputeInfo** out,
                                  const DequantizedView* quantized) {
  VitEncoderSpec spec;
  spec.hidden = claim.hidden;
  spec.heads = claim.heads;
  spec.from_pixels = claim.from_pixels;
  if (device_->float_compute_type() == ElementType::kFloat16 && claim.heads > 0) {
    AttentionRouteQuery attention;
    attention.head_dim = claim.hidden / claim.heads;
    attention.heads = claim.heads;
    attention.workers = static_cast<int>(knobs_.integer("sim_workers"));
    const auto placement = parse_attention_placement(knobs_.text("attention"));
    spec.device_attention_min_tokens =
        device_attention_min_tokens(placement.value_or(AttentionPlacement::kAuto), attention);
    logger_.info(str_cat(
        claim.family, " encoder: attention on ", device_->name(),
        spec.device_attention_min_tokens
            ? str_cat(" from ", *spec.device_attention_min_tokens, " tokens")
            : str_cat(" never, on the host",
                      attention.head_dim % kAttentionHeadDimMultiple != 0
                          ? str_cat(" (head_dim ", attention.head_dim, " is not a multiple of ",
                                    kAttentionHeadDimMultiple, ", flash attention's contract)")
                          : std::string()),
        " (attention=", knobs_.text("attention"), ")"));
  }
  std::vector<std::vector<float>> owned;  // gathered side operands, alive until create() copies
  Status failed = Status::ok();
  auto ref = [&](const std::string& name) -> FloatRef {
    auto r = constant_ref(view, name);
    if (!r.is_ok()) {
      if (failed.is_ok()) failed = r.status();
      return {};
    }
    return r.value();
  };
  auto opt = [&](const std::string& name) -> std::optional<FloatRef> {
    if (name.empty()) return std::nullopt;
    return ref(name);
  };
  auto dense = [&](const DenseRef& d) {
    DenseWeights w;
    w.weight = ref(d.weight);
    w.transposed = d.transposed;
    w.col_begin = d.col_begin;
    w.cols = d.cols;
    w.bias = opt(d.bias);
    if (const DynamicInt8Weight* integer =
            quantized ? quantized->dynamic_weight(d.weight) : nullptr) {
      w.dynamic = DynamicInt8Projection{integer->type, integer->data, integer->zero_points,
                                        integer->scales};
    }
    return w;
  };
  auto norm = [&](const NormRef& n) {
    NormWeights w;
    w.gamma = ref(n.gamma);
    w.beta = opt(n.beta);
    w.epsilon = n.epsilon;
    return w;
  };

  // Inputs and outputs of the fused node, by name.
  const OrtApi& ort = *api().ort;
  std::vector<std::string> input_names;
  NPUFLOW_RETURN_IF_ERROR(fused_input_names(fused_node, input_names));
  size_t output_count = 0;
  NPUFLOW_ORT_CHECK(ort.Node_GetNumOutputs(fused_node, &output_count));
  std::vector<const OrtValueInfo*> outputs(output_count);
  NPUFLOW_ORT_CHECK(ort.Node_GetOutputs(fused_node, outputs.data(), output_count));
  auto input_index = [&](const std::string& name) { return index_of(input_names, name); };
  EncoderNodeBinding binding;
  // A runtime value the plan reads: an output of the claim's tensor program, else a fused node
  // input.
  auto source = [&](const std::string& name) -> std::optional<EncoderInputSource> {
    const auto& produced = claim.program.output_names;
    for (size_t i = 0; i < produced.size(); ++i)
      if (produced[i] == name) return EncoderInputSource{true, i};
    if (auto index = input_index(name)) return EncoderInputSource{false, *index};
    return std::nullopt;
  };
  if (!claim.program.empty()) {
    auto program = std::make_shared<TensorProgram>(claim.program);
    NPUFLOW_RETURN_IF_ERROR(load_program_constants(view, *program));
    NPUFLOW_RETURN_IF_ERROR(bind_program_inputs(*program, input_names, binding.program_inputs));
    binding.program = std::move(program);
  }
  binding.portable_kernels = knobs_.text("host_kernels") == "portable";
  auto main = source(claim.input);
  if (!main)
    return internal_error(str_cat("'", claim.input, "' is not an input of the fused node"));
  binding.main_input = *main;
  auto side = [&](const SideRef& s, SideOperand& operand) -> Status {
    operand.present = s.present;
    if (!s.present) return Status::ok();
    if (!s.runtime.empty()) {
      auto index = source(s.runtime);
      if (!index) return internal_error(str_cat("'", s.runtime, "' is not a fused node input"));
      operand.input_index = static_cast<int64_t>(binding.side_inputs.size());
      binding.side_inputs.push_back(*index);
      return Status::ok();
    }
    if (!s.values.empty()) {  // derived by the matcher
      owned.push_back(s.values);
      operand.constant = FloatRef{owned.back().data(), s.values_shape};
      return Status::ok();
    }
    FloatRef table = ref(s.constant);
    if (s.gather_indices.empty()) {
      operand.constant = table;
      return Status::ok();
    }
    const ValueId ids = view.find_value(s.gather_indices);
    const bool wide = ids != kNoValue && view.value(ids).type == ElementType::kInt64;
    const bool narrow = ids != kNoValue && view.value(ids).type == ElementType::kInt32;
    if (!view.is_constant(ids) || !(wide || narrow) || table.shape.size() != 2)
      return internal_error("a gathered side operand is not a constant integer gather of rows");
    const ValueInfo& iv = view.value(ids);
    // Gather takes int32 or int64 indices.
    auto index_at = [&](size_t i) -> int64_t {
      return wide ? static_cast<const int64_t*>(iv.constant->data)[i]
                  : static_cast<const int32_t*>(iv.constant->data)[i];
    };
    const size_t count = iv.constant->bytes / (wide ? 8 : 4);
    std::vector<float> rows;
    for (size_t i = 0; i < count; ++i) {
      const int64_t at = index_at(i);
      int64_t r = at < 0 ? at + table.shape[0] : at;
      if (r < 0 || r >= table.shape[0]) return invalid_argument("gather index out of range");
      rows.insert(rows.end(), table.data + r * table.shape[1],
                  table.data + (r + 1) * table.shape[1]);
    }
    owned.push_back(std::move(rows));
    std::vector<int64_t> shape = iv.shape;
    shape.push_back(table.shape[1]);
    operand.constant = FloatRef{owned.back().data(), shape};
    return Status::ok();
  };
  if (claim.pre_norm) spec.pre_norm = norm(*claim.pre_norm);
  if (claim.from_pixels) {
    spec.patch.weight = ref(claim.patch_weight);
    spec.patch.bias = opt(claim.patch_bias);
    spec.patch.stride_h = claim.stride_h;
    spec.patch.stride_w = claim.stride_w;
    NPUFLOW_RETURN_IF_ERROR(side(claim.cls, spec.cls));
    NPUFLOW_RETURN_IF_ERROR(side(claim.pos, spec.pos));
    NPUFLOW_RETURN_IF_ERROR(side(claim.registers, spec.registers));
    spec.register_position = claim.register_position;
  }
  // Each distinct runtime attention bias is one side input, shared by the layers that add it.
  std::map<std::string, int64_t> bias_inputs;
  auto bias_input = [&](const std::string& value) -> Result<int64_t> {
    if (value.empty()) return int64_t{-1};
    if (auto it = bias_inputs.find(value); it != bias_inputs.end()) return it->second;
    auto index = source(value);
    if (!index) {
      return internal_error(str_cat("'", value, "' (an attention bias) is not a fused node input"));
    }
    const auto at = static_cast<int64_t>(binding.side_inputs.size());
    binding.side_inputs.push_back(*index);
    bias_inputs[value] = at;
    return at;
  };
  for (const EncoderLayerRef& l : claim.layers) {
    EncoderLayerWeights w;
    w.pre_norm = l.pre_norm;
    w.attention_norm = l.attention_norm;
    w.glu = l.glu;
    auto bias = bias_input(l.attention_bias);
    if (!bias.is_ok()) return bias.status();
    w.attention_bias_input = bias.value();
    NPUFLOW_RETURN_IF_ERROR(side(l.rope_cos, w.rope_cos));
    NPUFLOW_RETURN_IF_ERROR(side(l.rope_sin, w.rope_sin));
    for (SideOperand* table : {&w.rope_cos, &w.rope_sin}) {
      if (l.rope_perm.empty() || !table->present) continue;
      if (!table->constant) {  // laid out at each run
        table->perm = l.rope_perm;
        continue;
      }
      PermutedTable laid_out =
          permute_table(table->constant->data, table->constant->shape, l.rope_perm);
      if (laid_out.shape.empty()) return internal_error("a rotary table does not lay out");
      owned.push_back(std::move(laid_out.data));
      table->constant = FloatRef{owned.back().data(), laid_out.shape};
    }
    if (l.attention_norm || !l.pre_norm) w.norm1 = norm(l.norm1);
    w.norm2 = norm(l.norm2);
    w.q = dense(l.q);
    w.k = dense(l.k);
    w.v = dense(l.v);
    w.o = dense(l.o);
    w.fc1 = dense(l.fc1);
    w.fc2 = dense(l.fc2);
    w.layer_scale1 = opt(l.layer_scale1);
    w.layer_scale2 = opt(l.layer_scale2);
    w.attention_scale = l.attention_scale;
    w.softmax_nan_to_zero = l.softmax_nan_to_zero;
    w.attention_group = l.attention_group;
    if (l.grid) {  // the claim outlives create(), which copies the tables
      w.grid =
          GridAttention{l.grid->grid_h, l.grid->grid_w, l.grid->window, std::nullopt, std::nullopt};
      if (!l.grid->rel_h.empty()) {
        w.grid->rel_h = FloatRef{l.grid->rel_h.data(), l.grid->rel_h_shape};
        w.grid->rel_w = FloatRef{l.grid->rel_w.data(), l.grid->rel_w_shape};
      }
    }
    w.activation = l.activation;
    spec.layers.push_back(std::move(w));
  }
  for (const NormRef& n : claim.exit_norms) spec.exit_norms.push_back(norm(n));
  for (const EncoderExitRef& e : claim.exits) spec.exits.push_back({e.stream_index, e.norm});
  NPUFLOW_RETURN_IF_ERROR(failed);
  for (size_t i = 0; i < output_count; ++i) {
    const char* n = nullptr;
    NPUFLOW_ORT_CHECK(ort.GetValueInfoName(outputs[i], &n));
    int exit = -1;
    for (size_t e = 0; e < claim.exits.size(); ++e) {
      if (n && claim.exits[e].value == n) exit = static_cast<int>(e);
    }
    if (exit < 0) {
      return internal_error(str_cat("fused encoder output '", n ? n : "?", "' is not an exit"));
    }
    binding.output_exit.push_back(exit);
  }
  const char* fused_name = nullptr;
  NPUFLOW_ORT_CHECK(ort.Node_GetName(fused_node, &fused_name));
  auto plan =
      VitEncoder::create(fused_name ? fused_name : claim.family, spec, device_, logger_, host_);
  if (!plan.is_ok()) return plan.status();
  std::shared_ptr<const VitEncoder> shared = std::move(plan).value();
  logger_.verbose(str_cat("compiled vision encoder ", shared->name(), ": ", claim.family, ", ",
                          claim.layers.size(), " layers, d=", claim.hidden, ", ", claim.heads,
                          " heads, resident=", shared->resident_bytes(), " bytes"));
  totals_->encoders.push_back(shared);
  if (reference_device_) {
    // The same encoder planned on the host (fp32 throughout), built now while the graph's
    // constants are still readable.
    auto reference =
        VitEncoder::create(str_cat(shared->name(), "/reference"), spec, reference_device_, logger_);
    if (!reference.is_ok()) return reference.status();
    std::shared_ptr<const VitEncoder> ref = std::move(reference).value();
    const VitEncoder* ref_plan = ref.get();
    auto verifier = std::make_shared<const ClaimVerifier>(
        str_cat(claim.family, " encoder (", claim.layers.size(), " layers, fused node '",
                shared->name(), "')"),
        ClaimGate::for_float_device(device_->float_compute_type(),
                                    spec.device_attention_min_tokens.has_value()),
        logger_, std::move(ref));
    totals_->verifiers.push_back(verifier);
    *out = new EncoderNodeCompute(std::move(shared), std::move(binding), std::move(verifier),
                                  ref_plan);
    return Status::ok();
  }
  *out = new EncoderNodeCompute(std::move(shared), std::move(binding));
  return Status::ok();
}

}  // namespace npuflow::ort
