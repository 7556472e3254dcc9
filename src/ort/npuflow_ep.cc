#include "ort/npuflow_ep.h"

#include <cstdio>
#include <vector>

#include "core/strings.h"
#include "graph/claim_report.h"
#include "graph/gemm_census.h"
#include "graph/qdq_matcher.h"
#include "ort/ort_graph_view.h"
#include "ort/qdq_node_compute.h"
#include "route/device_selection.h"

namespace npuflow::ort {

struct NpuflowEp::Totals {
  std::vector<std::shared_ptr<const QdqMatMul>> kernels;
};

namespace {

// Provider options arrive as session config entries "ep.<lower-cased EP name>.<key>".
Knobs::Lookup provider_option_lookup(const OrtSessionOptions* options) {
  return [options](const KnobSpec& spec) -> std::optional<std::string> {
    if (options == nullptr) return std::nullopt;
    const OrtApi& ort = *api().ort;
    const std::string key = str_cat("ep.", to_lower(kEpName), ".", spec.name);
    int has = 0;
    if (OrtStatus* status = ort.HasSessionConfigEntry(options, key.c_str(), &has)) {
      ort.ReleaseStatus(status);
      return std::nullopt;
    }
    if (!has) return std::nullopt;
    size_t size = 0;
    if (OrtStatus* status = ort.GetSessionConfigEntry(options, key.c_str(), nullptr, &size)) {
      ort.ReleaseStatus(status);
    }
    std::string value(size, '\0');
    if (OrtStatus* status = ort.GetSessionConfigEntry(options, key.c_str(), value.data(), &size)) {
      ort.ReleaseStatus(status);
      return std::nullopt;
    }
    value.resize(size > 0 ? size - 1 : 0);  // drop the terminating NUL
    return value;
  };
}

}  // namespace

Result<std::unique_ptr<NpuflowEp>> NpuflowEp::create(const OrtSessionOptions* session_options,
                                                     const OrtLogger* session_logger) {
  auto knobs = Knobs::resolve(provider_option_lookup(session_options));
  if (!knobs.is_ok()) return knobs.status();
  Logger logger = make_ort_logger(knobs.value().log_level(), session_logger);
  auto device = create_device(device_config_from(knobs.value()));
  if (!device.is_ok()) return device.status();
  std::shared_ptr<Device> shared_device = std::move(device.value().device);
  logger.info(str_cat("session created on ", shared_device->description(), " (",
                      device.value().reason, "), min_rows=", knobs.value().integer("min_rows"),
                      ", qdq=", knobs.value().text("qdq")));
  return std::unique_ptr<NpuflowEp>(
      new NpuflowEp(std::move(knobs).value(), std::move(logger), std::move(shared_device)));
}

NpuflowEp::NpuflowEp(Knobs knobs, Logger logger, std::shared_ptr<Device> device)
    : OrtEp{},
      knobs_(std::move(knobs)),
      logger_(std::move(logger)),
      device_(std::move(device)),
      totals_(new Totals) {
  ort_version_supported = api().version;
  GetName = GetNameImpl;
  GetCapability = GetCapabilityImpl;
  Compile = CompileImpl;
  ReleaseNodeComputeInfos = ReleaseNodeComputeInfosImpl;
}

NpuflowEp::~NpuflowEp() {
  int64_t device_calls = 0, host_calls = 0, fallbacks = 0;
  for (const auto& kernel : totals_->kernels) {
    device_calls += kernel->counters().device_calls;
    host_calls += kernel->counters().host_row_calls;
    fallbacks += kernel->counters().fallback_calls;
  }
  const std::string summary = str_cat(
      "session summary: ", totals_->kernels.size(), " fused QDQ MatMuls on ", device_->name(), ", ",
      device_calls, " device calls, ", host_calls, " host-rows calls, ", fallbacks, " fallbacks");
  logger_.verbose(summary);
  if (knobs_.flag("prof")) {
    // NPUFLOW_PROF=1 asked for this at exit whatever the log level: straight to stderr.
    std::fprintf(stderr, "npuflow %s\n%s", summary.c_str(), device_->profile_report().c_str());
    std::fflush(stderr);
  }
}

const char* NpuflowEp::GetNameImpl(const OrtEp*) noexcept {
  return kEpName;
}

OrtStatus* NpuflowEp::GetCapabilityImpl(OrtEp* self, const OrtGraph* graph,
                                        OrtEpGraphSupportInfo* support) noexcept {
  return guarded([&] { return static_cast<NpuflowEp*>(self)->get_capability(graph, support); });
}

Status NpuflowEp::get_capability(const OrtGraph* graph, OrtEpGraphSupportInfo* support) {
  auto snapshot = snapshot_graph(graph);
  if (!snapshot.is_ok()) return snapshot.status();
  const OrtGraphSnapshot& snap = snapshot.value();

  QdqMatcherOptions options;
  options.enabled = knobs_.flag("qdq");
  const ClaimSet claims = match_qdq_matmuls(snap.view, options);

  OrtNodeFusionOptions fusion{};
  fusion.ort_version_supported = api().version;
  fusion.drop_constant_initializers = false;  // see docs/architecture.md: a known ORT crash path
  for (const Claim& claim : claims.claims) {
    std::vector<const OrtNode*> nodes;
    for (NodeId id : claim.nodes) nodes.push_back(snap.ort_nodes[static_cast<size_t>(id)]);
    NPUFLOW_ORT_CHECK(
        api().ep->EpGraphSupportInfo_AddNodesToFuse(support, nodes.data(), nodes.size(), &fusion));
    std::lock_guard<std::mutex> lock(mutex_);
    claims_by_output_[claim.qdq.matmul_output] = claim.qdq;
  }
  for (const std::string& line : summarize_claims(snap.view.name, claims)) logger_.info(line);
  if (!knobs_.text("report").empty()) {
    write_report(claims_to_json(snap.view.name, snap.view, claims,
                                unclaimed_gemms(snap.view, claims)));
  }
  return Status::ok();
}

void NpuflowEp::write_report(const std::string& json_line) const {
  const std::string& path = knobs_.text("report");
  if (FILE* file = std::fopen(path.c_str(), "a")) {
    std::fprintf(file, "%s\n", json_line.c_str());
    std::fclose(file);
  } else {
    logger_.warning(str_cat("cannot append the claim report to '", path, "'"));
  }
}

OrtStatus* NpuflowEp::CompileImpl(OrtEp* self, const OrtGraph** graphs, const OrtNode** fused_nodes,
                                  size_t count, OrtNodeComputeInfo** infos,
                                  OrtNode** ep_context_nodes) noexcept {
  auto* ep = static_cast<NpuflowEp*>(self);
  for (size_t i = 0; i < count; ++i) {
    infos[i] = nullptr;
    if (ep_context_nodes) ep_context_nodes[i] = nullptr;
  }
  OrtStatus* status = guarded([&] {
    for (size_t i = 0; i < count; ++i) {
      NPUFLOW_RETURN_IF_ERROR(ep->compile_one(graphs[i], fused_nodes[i], &infos[i]));
    }
    return Status::ok();
  });
  if (status != nullptr) {
    ReleaseNodeComputeInfosImpl(self, infos, count);
    for (size_t i = 0; i < count; ++i) infos[i] = nullptr;
  }
  return status;
}

Status NpuflowEp::compile_one(const OrtGraph* graph, const OrtNode* fused_node,
                              OrtNodeComputeInfo** out) {
  auto snapshot = snapshot_graph(graph);
  if (!snapshot.is_ok()) return snapshot.status();
  const GraphView& view = snapshot.value().view;

  // Find the group's MatMul and the claim GetCapability made for it.
  QdqMatMulClaim claim;
  bool found = false;
  for (const NodeInfo& node : view.nodes) {
    if (node.op_type != "MatMul") continue;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = claims_by_output_.find(view.value(node.outputs[0]).name);
    if (it != claims_by_output_.end()) {
      claim = it->second;
      found = true;
    }
  }
  if (!found) return internal_error("a fused node has no QDQ MatMul claim from GetCapability");

  const ValueId weight_id = view.find_value(claim.weight_name);
  if (!view.is_constant(weight_id)) {
    return internal_error(str_cat("weight '", claim.weight_name, "' is missing at compile time"));
  }
  const ConstantData& weight = *view.value(weight_id).constant;
  if (weight.bytes != static_cast<size_t>(claim.spec.k * claim.spec.n)) {
    return invalid_argument(str_cat("weight '", claim.weight_name, "' holds ", weight.bytes,
                                    " bytes for a ", claim.spec.k, "x", claim.spec.n, " matrix"));
  }

  // Locate the activation among the fused node's inputs.
  const OrtApi& ort = *api().ort;
  size_t input_count = 0;
  NPUFLOW_ORT_CHECK(ort.Node_GetNumInputs(fused_node, &input_count));
  std::vector<const OrtValueInfo*> inputs(input_count);
  NPUFLOW_ORT_CHECK(ort.Node_GetInputs(fused_node, inputs.data(), input_count));
  QdqNodeBinding binding;
  binding.activation_type = claim.activation_type;
  binding.activation_dequantized = claim.activation_dequantized;
  bool bound = false;
  for (size_t i = 0; i < input_count; ++i) {
    const char* name = nullptr;
    if (inputs[i] == nullptr) continue;
    NPUFLOW_ORT_CHECK(ort.GetValueInfoName(inputs[i], &name));
    if (claim.activation_name == name) {
      binding.activation_input = i;
      bound = true;
    }
  }
  if (!bound) {
    return internal_error(
        str_cat("activation '", claim.activation_name, "' is not an input of the fused node"));
  }

  const char* fused_name = nullptr;
  NPUFLOW_ORT_CHECK(ort.Node_GetName(fused_node, &fused_name));
  auto kernel =
      QdqMatMul::create(fused_name ? fused_name : claim.matmul_output, claim.spec, weight.data,
                        claim.weight_type, device_, knobs_.integer("min_rows"), logger_);
  if (!kernel.is_ok()) return kernel.status();
  std::shared_ptr<const QdqMatMul> shared = std::move(kernel).value();
  logger_.verbose(str_cat("compiled ", fused_name ? fused_name : "?", ": k=", claim.spec.k,
                          " n=", claim.spec.n, " weight scales=", claim.spec.w_scales.size(),
                          " zp_x=", claim.spec.x_zero_point, " resident=", shared->resident_bytes(),
                          " bytes"));
  totals_->kernels.push_back(shared);
  *out = new QdqNodeCompute(std::move(shared), binding);
  return Status::ok();
}

void NpuflowEp::ReleaseNodeComputeInfosImpl(OrtEp*, OrtNodeComputeInfo** infos,
                                            size_t count) noexcept {
  for (size_t i = 0; i < count; ++i) delete static_cast<QdqNodeCompute*>(infos[i]);
}

}  // namespace npuflow::ort
