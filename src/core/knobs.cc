#include "core/knobs.h"

#include <array>
#include <cstdlib>
#include <stdexcept>

#include "core/strings.h"

namespace npuflow {
namespace {

constexpr std::array kKnobs = {
    KnobSpec{"log", "NPUFLOW_LOG", KnobKind::kLogLevel, "warning",
             "error|warning|info|verbose|trace",
             "How much npuflow logs: info prints claims and refusals per graph, trace one line per "
             "kernel call."},
    KnobSpec{"device", "NPUFLOW_DEVICE", KnobKind::kChoice, "auto", "auto|host|sim|rocket",
             "Which device runs claimed work: host is the exact CPU reference, sim the RK3588 NPU "
             "simulator, rocket the RK3588 NPU through librocketnpu (the rocketnpu knob; needs "
             "the rocket module, libnpuflow-device-rocket.so, else session creation fails and "
             "says why). auto picks rocket when a board is usable and the module is there, else "
             "host; never sim. In the ggml backend, auto without a board leaves NPUFLOW idle (it "
             "takes no op)."},
    KnobSpec{"rocketnpu", "NPUFLOW_ROCKETNPU", KnobKind::kText, "librocketnpu.so.0", "",
             "The librocketnpu that device=rocket drives: a soname or a path. Tests point it at "
             "librocketnpu-sim.so, the simulator behind librocketnpu's C API."},
    KnobSpec{"qdq", "NPUFLOW_QDQ", KnobKind::kBool, "1", "",
             "Claim DequantizeLinear -> MatMul [-> QuantizeLinear] groups, dynamic int8 "
             "(DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul [-> Add]), MatMulInteger "
             "and QLinearMatMul as fused integer nodes. 0 turns these claims off (the control "
             "arm)."},
    KnobSpec{"quant", "NPUFLOW_QUANT", KnobKind::kChoice, "fp16", "fp16|w8a8|strict",
             "How an encoder whose linears are QDQ groups is claimed. fp16: as one encoder "
             "node, its weights dequantized once (fp16 on the NPU, fp32 on host) and its "
             "activation Q/DQ pairs dropped; the QDQ groups inside it give way. w8a8: every QDQ "
             "MatMul group stays a native int8 claim with the exact epilogue, and the encoder "
             "is not claimed as one node. strict: as fp16, and a quantized graph whose encoder "
             "candidate is not claimed fails session creation with the reason."},
    KnobSpec{"float_matmul", "NPUFLOW_FLOAT_MATMUL", KnobKind::kChoice, "off", "off|int8",
             "int8 also claims every float MatMul with a constant 2-D weight that no other claim "
             "takes, as an int8 GEMM: the weight quantized once per output column, the "
             "activation per row at run time (scale amax/127). Lossy by design (within 2% "
             "relative error of the fp32 MatMul); taken whatever the claim policy. off: none."},
    KnobSpec{"vision", "NPUFLOW_VISION", KnobKind::kBool, "1", "",
             "Claim vision-transformer encoders (ViT, CLIP, SigLIP, DINOv2, Depth Anything) by "
             "structure and run each as one resident fused node. 0 turns the claim off."},
    KnobSpec{"conv_transpose", "NPUFLOW_CONV_TRANSPOSE", KnobKind::kBool, "1", "",
             "Claim every 2-D, group-1 float ConvTranspose with a constant weight whose attributes "
             "the device admits, in any graph (the claim policy weighs it like any claim). On an "
             "NPU it runs in fp16, on the host in fp32. 0 turns the claim off."},
    KnobSpec{"conv", "NPUFLOW_CONV", KnobKind::kBool, "1", "",
             "Claim every 2-D, group-1 float Conv with a constant weight that no other claim "
             "holds, in any graph (SAM's neck, RF-DETR's projector; the claim policy weighs it "
             "like any claim). On an NPU it runs as the device's fp16 convolution, on the host "
             "as oneDNN's fp32 convolution. 0 turns the claim off."},
    KnobSpec{"heads", "NPUFLOW_HEADS", KnobKind::kInt, "0", "0..4096",
             "Attention head count of a claimed vision encoder. 0 infers it from the graph's head "
             "split; when that is impossible the refusal names this knob."},
    KnobSpec{"attention", "NPUFLOW_ATTENTION", KnobKind::kChoice, "auto", "auto|device|host",
             "Where a claimed encoder's attention runs when its projections run on an NPU "
             "(sim, rocket). device: on the NPU (librocketnpu's flash attention; a call it "
             "refuses, such as a query row with every key masked, runs on the host); host: "
             "npuflow's fp32 host "
             "kernels; auto: the device from the token count at which the board model prices "
             "it faster than the host (per-head submits make short sequences lose). Unused on "
             "the host device."},
    KnobSpec{"min_rows", "NPUFLOW_MIN_ROWS", KnobKind::kInt, "16", "1..1048576",
             "A fused QDQ or integer MatMul call with fewer activation rows runs the host "
             "integer loop instead of the device. Unused on the host device, whose own kernels "
             "take every row count."},
    KnobSpec{"threads", "NPUFLOW_THREADS", KnobKind::kInt, "0", "0..1024",
             "Threads the host device starts itself when ONNX Runtime lends it no pool. Inside a "
             "session npuflow runs on the session's intra-op threads and this is unused; 0 means "
             "one per core."},
    KnobSpec{"sim_kacc", "NPUFLOW_SIM_KACC", KnobKind::kChoice, "npu", "npu|host",
             "sim only: where fp16 K tiles accumulate. npu adds each tile to the previous fp16 "
             "partial on the NPU (KACC, the library default); host rounds each tile to fp16 and "
             "sums in fp32 on the host (ROCKET_KACC=0)."},
    KnobSpec{"sim_via", "NPUFLOW_SIM_VIA", KnobKind::kChoice, "rocket", "rocket|direct",
             "sim only: how the simulator is reached. rocket: through the rocket device module "
             "bound to librocketnpu-sim.so, the adapter code a board runs (the simulator called "
             "directly when this build has no rocket module); direct: the simulator called "
             "directly."},
    KnobSpec{"sim_fail_every", "NPUFLOW_SIM_FAIL_EVERY", KnobKind::kInt, "0", "0..1000000",
             "sim only, for tests: every Nth accepted device call fails its submit "
             "(ROCKET_E_DEVICE), which the caller must survive by running the host. 0 never."},
    KnobSpec{"sim_corrupt_every", "NPUFLOW_SIM_CORRUPT_EVERY", KnobKind::kInt, "0", "0..1000000",
             "sim only, for tests: every Nth accepted device call returns with its first output "
             "element far off, as a silently miscomputing NPU would; nothing but verify=1 "
             "notices. 0 never."},
    KnobSpec{"program_ops", "NPUFLOW_PROGRAM_OPS", KnobKind::kBool, "0", "",
             "For tests: every node the tensor-program interpreter implements (the ops a claim "
             "runs for a text encoder's embedding and masks) that no other claim takes runs in "
             "it, as a fused node of its own or, when that is every node, as one; the "
             "interpreter is then checked against the CPU EP op by op. 0 off."},
    KnobSpec{"sim_workers", "NPUFLOW_SIM_WORKERS", KnobKind::kInt, "5", "1..8",
             "sim only: worker fds the simulated library splits N across (ROCKET_N_THREADS, "
             "default 5 for 3 cores). The split changes tiling, hence fp16 rounding."},
    KnobSpec{"host_kernels", "NPUFLOW_HOST_KERNELS", KnobKind::kChoice, "auto", "auto|portable",
             "The vector kernels of npuflow's own encoder ops (LayerNorm, activations, "
             "attention; the GEMMs are the device's): auto runs AVX2+FMA where the CPU has "
             "them, portable the plain loops every other CPU runs (the RK3588's arm64), so an "
             "x86 machine can test those."},
    KnobSpec{"prof", "NPUFLOW_PROF", KnobKind::kBool, "0", "",
             "1 prints a profile to stderr: when an ONNX Runtime session ends, calls per route "
             "and, on sim, submits, tiles, bytes moved and the modelled RK3588 time; when the "
             "ggml backend is freed, its counters (MUL_MATs run, M histogram, resident weights) "
             "and, for MoE models, each expert tensor's routing (histogram, skew, cache hit "
             "rate, bytes packed)."},
    KnobSpec{"min_m", "NPUFLOW_MIN_M", KnobKind::kInt, "128", "1..1048576",
             "ggml backend: a MUL_MAT with an F32/F16/BF16 weight runs on NPUFLOW only with at "
             "least this many activation rows, and a FLASH_ATTN_EXT with this many query rows; "
             "fewer (decode) stay on the CPU backend."},
    KnobSpec{"min_m_quant", "NPUFLOW_MIN_M_QUANT", KnobKind::kInt, "128", "1..1048576",
             "ggml backend: the same threshold for quantized weights (Q8_0, Q4_0, Q4_1, Q4_K, "
             "Q5_K, Q6_K, MXFP4), which are packed once and stay resident (quant_path says how)."},
    KnobSpec{"quant_path", "NPUFLOW_QUANT_PATH", KnobKind::kChoice, "native", "native|dequant",
             "ggml backend: how a quantized weight becomes resident. native: Q8_0, Q4_0, Q4_1, "
             "Q4_K, Q5_K and MXFP4 stay integer values with their block scales (and the mins of "
             "Q4_1 and the K-quants) and run on the device's group-wise int8 GEMM, the activation "
             "quantized as the CPU backend does (per 32 values; K-quants: per 256) (resident on "
             "host: the GGUF's bytes, Q4_K 1.03x them, MXFP4 1.06x, Q5_K 1.02x; on an NPU, which "
             "reads int8 weights, 1.9x them for Q4_0 and Q4_K, 1.8x for Q4_1, 2.0x for MXFP4, "
             "1.57x for Q5_K); Q6_K too where the device takes its 16-value groups (host: 1.00x; "
             "the RK3588 does not); other types are dequantized. dequant: every type is widened "
             "to the "
             "device's float type once (fp32 on host, fp16 on an NPU), the control arm."},
    KnobSpec{"fuse_matmuls", "NPUFLOW_FUSE_MATMULS", KnobKind::kChoice, "auto", "auto|on|off",
             "ggml backend: MUL_MATs that follow one another in a graph split and read the same "
             "activation through weights of one type and width (llama.cpp's attention K and V, "
             "its FFN gate and up) run as one product over their weights stacked into one "
             "resident weight: one device call and one activation pack instead of one each, and "
             "a copy of each node's columns out of the stacked result. auto: on for an NPU "
             "(sim, rocket), whose calls each cost a submit; off on host, where the copy costs "
             "more than the call it saves (docs/ggml-backend.md). on, off: always, never."},
    KnobSpec{"fa_min_kv", "NPUFLOW_FA_MIN_KV", KnobKind::kInt, "1024", "1..1048576",
             "ggml backend: a FLASH_ATTN_EXT runs on NPUFLOW only with at least this many keys "
             "(n_kv) and min_m query rows, and only with claim=all (or on an NPU); shorter "
             "contexts stay on the CPU backend, where the device's per-call cost outweighs it."},
    KnobSpec{"cache_mb", "NPUFLOW_CACHE_MB", KnobKind::kInt, "0", "0..16777216",
             "ggml backend: budget in MiB for resident (dequantized, packed) weights, MoE "
             "experts included; beyond it weights are dropped by cache_policy. 0 means no "
             "limit."},
    KnobSpec{"cache_policy", "NPUFLOW_CACHE_POLICY", KnobKind::kChoice, "lfu", "lfu|lru",
             "ggml backend: which resident weight to drop when cache_mb is full. lfu: the one "
             "asked for least often, and a new weight displaces only ones asked for less often "
             "than it (a fixed subset stays resident under a model's cyclic layer order, the hot "
             "experts under skewed MoE routing); lru: the least recently used, which under that "
             "cyclic order drops each weight just before its next use (docs/ggml-backend.md has "
             "both measured)."},
    KnobSpec{"mem_budget_mb", "NPUFLOW_MEM_BUDGET_MB", KnobKind::kInt, "0", "0..16777216",
             "diffusion (npuflow diffuse): MiB for packed DiT weights. The shared layers and as "
             "many leading blocks as fit beside one streamed block's slot stay packed; the other "
             "blocks are packed into that slot before each of their turns and released after "
             "(never LRU: the blocks run in a cyclic order). 0 means every block stays resident."},
    KnobSpec{"mem_floor_mb", "NPUFLOW_MEM_FLOOR_MB", KnobKind::kInt, "256", "0..16777216",
             "diffusion: stop with a message, before loading and before packing a streamed "
             "block, when the system's available memory (MemAvailable) is below this many MiB. "
             "0 means no check."},
    KnobSpec{"verify", "NPUFLOW_VERIFY", KnobKind::kBool, "0", "",
             "1 checks each claimed node's first device run against the host reference within "
             "the claim's gate; a node outside it is disabled for the session (one warning with "
             "the difference) and runs the host reference from then on."},
    KnobSpec{"claim", "NPUFLOW_CLAIM", KnobKind::kChoice, "auto", "auto|faster|all",
             "faster claims a subgraph only where costs measured on this machine (the table "
             "`make bench` writes) say npuflow's host device is not slower than the CPU EP; all "
             "claims whatever matches. auto is faster when device=auto resolved to the host (no "
             "NPU), else all. ggml backend: faster takes a MUL_MAT only where the cost table "
             "(ggml_costs) says NPUFLOW is not slower than the CPU backend; auto is faster on "
             "host and all on sim."},
    KnobSpec{"claim_costs", "NPUFLOW_CLAIM_COSTS", KnobKind::kText, "", "",
             "The cost table claim=faster reads; empty means "
             "~/.cache/npuflow/claim-costs-<machine>.json."},
    KnobSpec{"ggml_costs", "NPUFLOW_GGML_COSTS", KnobKind::kText, "", "",
             "ggml backend: the MUL_MAT cost table claim=faster reads, measuring and adding each "
             "shape it lacks (a table from another machine or build is measured anew); empty "
             "means ~/.cache/npuflow/ggml-costs-<machine>-<build hash>.json."},
    KnobSpec{"report", "NPUFLOW_REPORT", KnobKind::kText, "", "",
             "If set, a path: each graph's claims and refusals are appended there as JSON lines "
             "(what `npuflow explain` reads)."},
};

Status validate(const KnobSpec& spec, const std::string& value, const std::string& origin) {
  auto bad = [&](const std::string& why) {
    return invalid_argument(str_cat(origin == "environment" ? spec.env : spec.name, "='", value,
                                    "' is not valid: ", why));
  };
  switch (spec.kind) {
    case KnobKind::kInt: {
      auto parsed = parse_int(value);
      if (!parsed) return bad("expected an integer");
      std::string range = spec.choices;
      size_t dots = range.find("..");
      int64_t lo = *parse_int(range.substr(0, dots));
      int64_t hi = *parse_int(range.substr(dots + 2));
      if (*parsed < lo || *parsed > hi) return bad(str_cat("expected ", lo, " to ", hi));
      return Status::ok();
    }
    case KnobKind::kBool:
      if (value != "0" && value != "1") return bad("expected 0 or 1");
      return Status::ok();
    case KnobKind::kLogLevel:
      if (!parse_log_level(value)) return bad(str_cat("expected one of ", spec.choices));
      return Status::ok();
    case KnobKind::kChoice: {
      std::string choices = spec.choices;
      for (size_t start = 0;;) {
        size_t bar = choices.find('|', start);
        if (choices.substr(start, bar - start) == value) return Status::ok();
        if (bar == std::string::npos) break;
        start = bar + 1;
      }
      return bad(str_cat("expected one of ", spec.choices));
    }
    case KnobKind::kText:
      return Status::ok();
  }
  return Status::ok();
}

}  // namespace

std::span<const KnobSpec> knob_table() {
  return kKnobs;
}

const KnobSpec* find_knob(std::string_view name) {
  for (const KnobSpec& spec : kKnobs) {
    if (name == spec.name) return &spec;
  }
  return nullptr;
}

Knobs::Lookup environment_lookup() {
  return [](const KnobSpec& spec) -> std::optional<std::string> {
    const char* value = std::getenv(spec.env);
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

Result<Knobs> Knobs::resolve(const Lookup& provider, const Lookup& environment) {
  const Lookup env = environment ? environment : environment_lookup();
  Knobs knobs;
  for (const KnobSpec& spec : kKnobs) {
    std::string value = spec.default_value;
    std::string origin = "default";
    if (auto from_env = env(spec)) {
      value = *from_env;
      origin = "environment";
    }
    if (provider) {
      if (auto from_provider = provider(spec)) {
        value = *from_provider;
        origin = "provider option";
      }
    }
    if (spec.kind == KnobKind::kLogLevel || spec.kind == KnobKind::kChoice) value = to_lower(value);
    NPUFLOW_RETURN_IF_ERROR(validate(spec, value, origin));
    knobs.values_[spec.name] = value;
    knobs.origins_[spec.name] = origin;
  }
  return knobs;
}

Knobs Knobs::defaults() {
  auto none = [](const KnobSpec&) -> std::optional<std::string> { return std::nullopt; };
  return resolve(none, none).value();
}

const std::string& Knobs::text(std::string_view name) const {
  auto it = values_.find(name);
  if (it == values_.end()) throw std::logic_error(str_cat("unknown knob ", name));
  return it->second;
}

int64_t Knobs::integer(std::string_view name) const {
  return *parse_int(text(name));
}
bool Knobs::flag(std::string_view name) const {
  return text(name) == "1";
}
LogLevel Knobs::log_level() const {
  return *parse_log_level(text("log"));
}

const std::string& Knobs::origin(std::string_view name) const {
  auto it = origins_.find(name);
  if (it == origins_.end()) throw std::logic_error(str_cat("unknown knob ", name));
  return it->second;
}

}  // namespace npuflow
