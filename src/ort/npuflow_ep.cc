#include "ort/npuflow_ep.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "core/strings.h"
#include "graph/claim_report.h"
#include "graph/conv_matcher.h"
#include "graph/conv_transpose_matcher.h"
#include "graph/encoder_matcher.h"
#include "graph/float_matmul_matcher.h"
#include "graph/gemm_census.h"
#include "graph/integer_matmul_matcher.h"
#include "graph/program_matcher.h"
#include "graph/qdq_matcher.h"
#include "graph/quantized_encoders.h"
#include "graph/quantized_view.h"
#include "ort/ep_totals.h"
#include "ort/fused_node_compute.h"
#include "ort/ort_graph_view.h"
#include "route/claim_policy.h"
#include "route/claim_verifier.h"
#include "route/device_selection.h"
#include "route/matmul_route.h"

namespace npuflow::ort {

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

// Whether the session's intra-op threads spin while idle: ONNX Runtime's default unless the
// config entry session.intra_op.allow_spinning is "0".
bool intra_op_spinning(const OrtSessionOptions* options) {
  if (options == nullptr) return true;
  const OrtApi& ort = *api().ort;
  const char* key = "session.intra_op.allow_spinning";
  char value[8] = {};
  size_t size = sizeof(value);
  if (OrtStatus* status = ort.GetSessionConfigEntry(options, key, value, &size)) {
    ort.ReleaseStatus(status);  // absent (or an unexpected length): the default
    return true;
  }
  return std::string(value) != "0";
}

}  // namespace

Result<std::unique_ptr<NpuflowEp>> NpuflowEp::create(const OrtSessionOptions* session_options,
                                                     const OrtLogger* session_logger) {
  auto knobs = Knobs::resolve(provider_option_lookup(session_options));
  if (!knobs.is_ok()) return knobs.status();
  Logger logger = make_ort_logger(knobs.value().log_level(), session_logger);
  const DeviceConfig config = device_config_from(knobs.value());
  auto device = create_device(config);
  if (!device.is_ok()) return device.status();
  std::shared_ptr<Device> shared_device = std::move(device.value().device);
  // The host is the reference itself: verifying it against itself would prove nothing, and it
  // comes with no host beside it.
  std::shared_ptr<Device> host = std::move(device.value().host);
  const bool verify = knobs.value().flag("verify") && host != nullptr;
  logger.info(str_cat(
      "session created on ", shared_device->description(), " (", device.value().reason,
      "), min_rows=", integer_min_rows(shared_device->name(), knobs.value().integer("min_rows")),
      ", qdq=", knobs.value().text("qdq"), ", verify=",
      verify                         ? "1 (against the host)"
      : knobs.value().flag("verify") ? "1 (nothing to check on the host)"
                                     : "0"));
  auto ep =
      std::unique_ptr<NpuflowEp>(new NpuflowEp(std::move(knobs).value(), std::move(logger),
                                               std::move(shared_device), std::move(host), verify));
  ep->intra_op_spinning_ = intra_op_spinning(session_options);
  return ep;
}

NpuflowEp::NpuflowEp(Knobs knobs, Logger logger, std::shared_ptr<Device> device,
                     std::shared_ptr<Device> host, bool verify)
    : OrtEp{},
      knobs_(std::move(knobs)),
      logger_(std::move(logger)),
      device_(std::move(device)),
      host_(std::move(host)),
      reference_device_(verify ? host_ : nullptr),
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
  int64_t integer_device_calls = 0, integer_host_calls = 0, integer_fallbacks = 0;
  for (const auto& kernel : totals_->integer_kernels) {
    integer_device_calls += kernel->counters().device_calls;
    integer_host_calls += kernel->counters().host_row_calls;
    integer_fallbacks += kernel->counters().fallback_calls;
  }
  const std::string summary = str_cat(
      "session summary: ", totals_->kernels.size(), " fused QDQ MatMuls on ", device_->name(), ", ",
      device_calls, " device calls, ", host_calls, " host-rows calls, ", fallbacks, " fallbacks");
  logger_.verbose(summary);
  if (!totals_->integer_kernels.empty()) {
    logger_.verbose(str_cat("integer MatMul summary: ", totals_->integer_kernels.size(),
                            " fused integer MatMuls, ", integer_device_calls, " device calls, ",
                            integer_host_calls, " host-rows calls, ", integer_fallbacks,
                            " fallbacks"));
  }
  auto convolution_summary = [&](const char* what, const auto& kernels) {
    if (kernels.empty()) return;
    int64_t on_device = 0, on_host = 0, fell_back = 0;
    for (const auto& kernel : kernels) {
      on_device += kernel->counters().device_calls;
      on_host += kernel->counters().host_calls;
      fell_back += kernel->counters().fallback_calls;
    }
    logger_.verbose(str_cat(what, " summary: ", kernels.size(), " claimed nodes on ",
                            device_->name(), ", ", on_device, " images on the device, ", on_host,
                            " on the host by choice, ", fell_back, " fallen back to the host"));
  };
  convolution_summary("ConvTranspose", totals_->conv_transposes);
  convolution_summary("Conv", totals_->convs);
  std::string verified;
  if (reference_device_) {
    int64_t disabled = 0, reference_runs = 0;
    for (const auto& verifier : totals_->verifiers) {
      verified += verifier->profile_line() + "\n";
      disabled += verifier->state() == ClaimVerifier::State::kDisabled;
      reference_runs += verifier->reference_runs();
    }
    verified =
        str_cat("npuflow verify summary: ", totals_->verifiers.size(),
                " claimed nodes checked against the host reference, ", disabled, " disabled, ",
                reference_runs, " later runs on the host reference\n", verified);
    logger_.verbose(verified);
  }
  if (knobs_.flag("prof")) {
    // NPUFLOW_PROF=1 asked for this at exit whatever the log level: straight to stderr.
    std::fprintf(stderr, "npuflow %s\n%s%s", summary.c_str(), device_->profile_report().c_str(),
                 verified.c_str());
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
  ClaimSet claims = match_qdq_matmuls(snap.view, options);
  // Do no harm (claim=faster): keep only what this machine's measured costs say is not slower.
  const ClaimPolicy policy =
      resolve_claim_policy(knobs_.text("claim"), knobs_.text("device"), device_->name());
  const std::string cost_path =
      knobs_.text("claim_costs").empty() ? default_cost_table_path() : knobs_.text("claim_costs");
  std::optional<CostTable> costs;
  if (policy == ClaimPolicy::kFaster) {
    auto loaded = load_cost_table(cost_path);
    if (loaded.is_ok()) costs = std::move(loaded).value();
  }
  apply_claim_policy(claims, policy, costs ? &*costs : nullptr, cost_path);

  // Dynamic int8 and QOperator groups (MatMulInteger, QLinearMatMul): disjoint from the QDQ
  // groups by op type.
  IntegerMatcherOptions integer_options;
  integer_options.enabled = knobs_.flag("qdq");
  ClaimSet integers = match_integer_matmuls(snap.view, integer_options);

  // Encoders, in a quantized graph as the `quant` knob says; a node belongs to one fused node at
  // most, and the mode says which side of an overlap gives way.
  EncoderMatcherOptions encoder_options;
  encoder_options.enabled = knobs_.flag("vision");
  encoder_options.heads = knobs_.integer("heads");
  const QuantMode quant = quant_mode(knobs_.text("quant"));
  ClaimSet encoders = match_encoders_in_quantized_graph(snap.view, quant, encoder_options);
  apply_claim_policy(encoders, policy, costs ? &*costs : nullptr, cost_path);
  resolve_encoder_overlaps(quant, encoders, claims, integers);
  // After the overlaps: the groups of an encoder declined above are judged on their own.
  apply_claim_policy(integers, policy, costs ? &*costs : nullptr, cost_path);

  OrtNodeFusionOptions fusion{};
  fusion.ort_version_supported = api().version;
  fusion.drop_constant_initializers = false;  // see docs/architecture.md: a known ORT crash path
  if (auto strict = strict_quant_failure(snap.view, quant, encoders)) {
    // ORT logs a GetCapability error and goes on; a Compile error fails session creation.
    const OrtNode* node = snap.ort_nodes[static_cast<size_t>(strict->node)];
    NPUFLOW_ORT_CHECK(api().ep->EpGraphSupportInfo_AddNodesToFuse(support, &node, 1, &fusion));
    logger_.error(strict->reason);
    std::lock_guard<std::mutex> lock(mutex_);
    strict_failures_by_output_[snap.view.value(snap.view.node(strict->node).outputs[0]).name] =
        strict->reason;
    return Status::ok();
  }
  for (const Claim& claim : claims.claims) {
    std::vector<const OrtNode*> nodes;
    for (NodeId id : claim.nodes) nodes.push_back(snap.ort_nodes[static_cast<size_t>(id)]);
    NPUFLOW_ORT_CHECK(
        api().ep->EpGraphSupportInfo_AddNodesToFuse(support, nodes.data(), nodes.size(), &fusion));
    std::lock_guard<std::mutex> lock(mutex_);
    claims_by_output_[claim.qdq.matmul_output] = claim.qdq;
  }
  for (const std::string& line : summarize_claims(snap.view.name, claims)) logger_.info(line);

  for (const Claim& claim : integers.claims) {
    std::vector<const OrtNode*> nodes;
    for (NodeId id : claim.nodes) nodes.push_back(snap.ort_nodes[static_cast<size_t>(id)]);
    NPUFLOW_ORT_CHECK(
        api().ep->EpGraphSupportInfo_AddNodesToFuse(support, nodes.data(), nodes.size(), &fusion));
    std::lock_guard<std::mutex> lock(mutex_);
    if (claim.kind == ClaimKind::kIntegerMatMul) {
      integer_claims_by_output_[claim.integer.matmul_output] = claim.integer;
    } else {
      claims_by_output_[claim.qdq.matmul_output] = claim.qdq;
    }
  }
  if (integers.candidates > 0) {
    for (const std::string& line :
         summarize_claims(snap.view.name, integers, "integer MatMul groups"))
      logger_.info(line);
  }

  std::set<NodeId> qdq_nodes;
  for (const Claim& claim : claims.claims) qdq_nodes.insert(claim.nodes.begin(), claim.nodes.end());
  for (const Claim& claim : integers.claims)
    qdq_nodes.insert(claim.nodes.begin(), claim.nodes.end());
  for (const Claim& claim : encoders.claims) {
    std::vector<const OrtNode*> nodes;
    for (NodeId id : claim.nodes) nodes.push_back(snap.ort_nodes[static_cast<size_t>(id)]);
    NPUFLOW_ORT_CHECK(
        api().ep->EpGraphSupportInfo_AddNodesToFuse(support, nodes.data(), nodes.size(), &fusion));
    std::lock_guard<std::mutex> lock(mutex_);
    for (const EncoderExitRef& exit : claim.encoder.exits)
      encoders_by_exit_[exit.value] = claim.encoder;
  }
  std::set<NodeId> taken = qdq_nodes;
  for (const Claim& claim : encoders.claims) taken.insert(claim.nodes.begin(), claim.nodes.end());
  // Float MatMuls as int8 (opt-in): whatever the matchers above left. An explicit request, so
  // the claim policy does not weigh it.
  ClaimSet float_matmuls;
  const bool float_int8 = knobs_.text("float_matmul") == "int8";
  if (float_int8) {
    float_matmuls = match_float_matmuls(snap.view, taken);
    for (const Claim& claim : float_matmuls.claims) {
      std::vector<const OrtNode*> nodes;
      for (NodeId id : claim.nodes) nodes.push_back(snap.ort_nodes[static_cast<size_t>(id)]);
      NPUFLOW_ORT_CHECK(api().ep->EpGraphSupportInfo_AddNodesToFuse(support, nodes.data(),
                                                                    nodes.size(), &fusion));
      taken.insert(claim.nodes.begin(), claim.nodes.end());
      std::lock_guard<std::mutex> lock(mutex_);
      integer_claims_by_output_[claim.integer.matmul_output] = claim.integer;
    }
    for (const std::string& line :
         summarize_claims(snap.view.name, float_matmuls, "float MatMuls as int8"))
      logger_.info(line);
  }
  // Single-node claims wherever they appear (ConvTranspose; Conv: SAM's neck, RF-DETR's
  // projector, a U-Net's encoder), weighed by the claim policy like any claim: each claimed node is
  // fused on its own and handed to `record` for Compile.
  auto claim_single_nodes = [&](ClaimSet& set, const char* what, auto&& record) -> Status {
    apply_claim_policy(set, policy, costs ? &*costs : nullptr, cost_path);
    for (const Claim& claim : set.claims) {
      const OrtNode* node = snap.ort_nodes[static_cast<size_t>(claim.nodes.front())];
      NPUFLOW_ORT_CHECK(api().ep->EpGraphSupportInfo_AddNodesToFuse(support, &node, 1, &fusion));
      taken.insert(claim.nodes.begin(), claim.nodes.end());
      std::lock_guard<std::mutex> lock(mutex_);
      record(claim);
    }
    if (set.candidates > 0) {
      for (const std::string& line : summarize_claims(snap.view.name, set, what))
        logger_.info(line);
    }
    return Status::ok();
  };
  ClaimSet conv_transposes;
  const bool claim_conv_transposes = knobs_.flag("conv_transpose");
  if (claim_conv_transposes) {
    conv_transposes = match_conv_transposes(snap.view, taken);
    NPUFLOW_RETURN_IF_ERROR(
        claim_single_nodes(conv_transposes, "ConvTranspose nodes", [&](const Claim& claim) {
          conv_transposes_by_output_[claim.conv_transpose.output] = claim.conv_transpose;
        }));
  }
  ClaimSet convs;
  const bool claim_convs = knobs_.flag("conv");
  if (claim_convs) {
    convs = match_convs(snap.view, taken);
    NPUFLOW_RETURN_IF_ERROR(claim_single_nodes(convs, "Conv nodes", [&](const Claim& claim) {
      convs_by_output_[claim.conv.output] = claim.conv;
    }));
  }
  const bool convolutions = !conv_transposes.claims.empty() || !convs.claims.empty();
  if (convolutions && intra_op_spinning_ && device_->name() != "host" &&
      !spinning_warned_.exchange(true)) {
    // Seed 000: spinning intra-op threads cost pix2pix 1.76x -> 1.46x while the NPU works.
    logger_.warning(
        "convolutions are claimed while ONNX Runtime's intra-op threads spin; set the session "
        "config entry session.intra_op.allow_spinning=0 so they do not compete with the device's "
        "host work");
  }
  ClaimSet programs;
  if (knobs_.flag("program_ops")) {
    programs.claims = match_program_ops(snap.view, taken);
    programs.candidates = static_cast<int>(programs.claims.size());
    for (const Claim& claim : programs.claims) {
      std::vector<const OrtNode*> nodes;
      for (NodeId id : claim.nodes) nodes.push_back(snap.ort_nodes[static_cast<size_t>(id)]);
      NPUFLOW_ORT_CHECK(api().ep->EpGraphSupportInfo_AddNodesToFuse(support, nodes.data(),
                                                                    nodes.size(), &fusion));
      std::lock_guard<std::mutex> lock(mutex_);
      for (const std::string& output : claim.program.output_names)
        programs_by_output_[output] = claim.program;
    }
  }
  const bool saw_encoders = encoders.candidates > 0 || !encoders.claims.empty();
  if (saw_encoders) {
    for (const std::string& line : summarize_claims(snap.view.name, encoders, "vision encoders"))
      logger_.info(line);
  }
  if (!knobs_.text("report").empty()) {
    ClaimSet every_claim = claims;
    every_claim.claims.insert(every_claim.claims.end(), encoders.claims.begin(),
                              encoders.claims.end());
    every_claim.claims.insert(every_claim.claims.end(), integers.claims.begin(),
                              integers.claims.end());
    every_claim.claims.insert(every_claim.claims.end(), float_matmuls.claims.begin(),
                              float_matmuls.claims.end());
    const std::vector<GemmWork> host = unclaimed_gemms(snap.view, every_claim);
    write_report(claims_to_json(snap.view.name, snap.view, claims, host, "qdq"));
    if (integers.candidates > 0) {
      write_report(claims_to_json(snap.view.name, snap.view, integers, host, "integer"));
    }
    if (saw_encoders) {
      write_report(claims_to_json(snap.view.name, snap.view, encoders, host, "vision"));
    }
    if (float_int8) {
      write_report(claims_to_json(snap.view.name, snap.view, float_matmuls, host, "float_int8"));
    }
    if (claim_conv_transposes && conv_transposes.candidates > 0) {
      write_report(
          claims_to_json(snap.view.name, snap.view, conv_transposes, host, "conv_transpose"));
    }
    if (claim_convs && convs.candidates > 0) {
      write_report(claims_to_json(snap.view.name, snap.view, convs, host, "conv"));
    }
    if (!programs.claims.empty()) {
      write_report(claims_to_json(snap.view.name, snap.view, programs, host, "program"));
    }
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

  // A claim recorded by the name of a value it computes: the first such value of the fused
  // subgraph (not one it merely reads) finds it.
  auto claimed_by = [&](const auto& by_value) {
    std::optional<typename std::decay_t<decltype(by_value)>::mapped_type> found;
    std::lock_guard<std::mutex> lock(mutex_);
    for (const ValueInfo& value : view.values) {
      auto it = by_value.find(value.name);
      if (it == by_value.end() || value.producer == kNoNode) continue;
      found = it->second;
      break;
    }
    return found;
  };
  if (auto strict = claimed_by(strict_failures_by_output_)) return invalid_argument(*strict);
  // A vision encoder: one of its exits is an output of the fused subgraph.
  if (auto encoder = claimed_by(encoders_by_exit_)) {
    if (!encoder->dequantized) return compile_encoder(view, *encoder, fused_node, out);
    // Its weights read through their DequantizeLinear nodes, as the matcher saw them.
    const DequantizedView dequantized(view, quantized_reading(quant_mode(knobs_.text("quant"))));
    return compile_encoder(dequantized.view(), *encoder, fused_node, out, &dequantized);
  }
  if (auto conv = claimed_by(conv_transposes_by_output_)) {
    return compile_conv_transpose(view, *conv, fused_node, out);
  }
  if (auto conv = claimed_by(convs_by_output_)) {
    return compile_conv(view, *conv, fused_node, out);
  }
  auto program = claimed_by(programs_by_output_);
  if (program) return compile_program(view, *program, fused_node, out);

  // An integer MatMul group: its MatMulInteger's output is in the fused subgraph (a float
  // MatMul taken as int8: that MatMul's).
  std::optional<IntegerMatMulClaim> integer;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const NodeInfo& node : view.nodes) {
      if (node.op_type != "MatMulInteger" && node.op_type != "MatMul") continue;
      auto it = integer_claims_by_output_.find(view.value(node.outputs[0]).name);
      if (it != integer_claims_by_output_.end()) integer = it->second;
    }
  }
  if (integer) return compile_integer(view, *integer, fused_node, out);

  // Find the group's MatMul and the claim GetCapability made for it.
  QdqMatMulClaim claim;
  bool found = false;
  for (const NodeInfo& node : view.nodes) {
    if (node.op_type != "MatMul" && node.op_type != "QLinearMatMul") continue;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = claims_by_output_.find(view.value(node.outputs[0]).name);
    if (it != claims_by_output_.end()) {
      claim = it->second;
      found = true;
    }
  }
  if (!found) return internal_error("a fused node has no QDQ MatMul claim from GetCapability");

  return compile_qdq(view, claim, fused_node, out);
}

void NpuflowEp::ReleaseNodeComputeInfosImpl(OrtEp*, OrtNodeComputeInfo** infos,
                                            size_t count) noexcept {
  for (size_t i = 0; i < count; ++i) {
    if (infos[i] == nullptr) continue;
    delete FusedNodeCompute::from(infos[i]);
  }
}

}  // namespace npuflow::ort
