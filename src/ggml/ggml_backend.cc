// libggml-npuflow.so: a runtime-loadable ggml backend (GGML_BACKEND_PATH) that registers one
// ACCEL device, NPUFLOW, beside the CPU backend, in the manner of ggml's BLAS backend. It claims
// the prefill MUL_MATs (activation rows >= min_m) whose weights it can keep resident on the
// device chosen by the `device` knob, as far as the offload policy lets it (device=auto without an
// NPU: none; on host: only where measured not slower than the CPU backend; see
// ggml_offload_policy.h), and, with claim=all only (no cost is measured for them), the prefill
// MUL_MAT_IDs (MoE experts, resident per expert) and FLASH_ATTN_EXTs from fa_min_kv keys;
// everything else, decode included, stays on the CPU.

#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "core/knobs.h"
#include "core/parallel.h"
#include "core/strings.h"
#include "ggml-backend-impl.h"
#include "ggml-backend.h"
#include "ggml/ggml-npuflow.h"
#include "ggml/ggml_cost_probe.h"
#include "ggml/ggml_fault.h"
#include "ggml/ggml_flash_attn.h"
#include "ggml/ggml_fusion.h"
#include "ggml/ggml_guard.h"
#include "ggml/ggml_matmul.h"
#include "ggml/ggml_offload_policy.h"
#include "ggml/ggml_view_ops.h"
#include "npuflow/version.h"
#include "route/claim_policy.h"
#include "route/device_selection.h"

namespace npuflow::ggml {
namespace {

struct RegContext {
  Knobs knobs = Knobs::defaults();
  Logger logger;
  std::unique_ptr<Device> device;
  MatmulRouting routing;
  FlashAttentionRouting attention_routing;
  std::unique_ptr<OffloadPolicy> policy;
  std::string description;
  bool report = false;        // print each backend's summary when it is freed
  bool fuse_matmuls = false;  // run MUL_MATs that share an activation as one product
};

RegContext* g_reg = nullptr;

// The CPU backend's thread count as the host program last set it on an NPUFLOW backend (llama.cpp
// sets the same count on every backend before each graph); 0 until then. supports_op is a device
// question, asked before any backend exists, so the cost policy keys on this.
std::atomic<int> g_threads{0};

int cpu_backend_threads() {
  const int set = g_threads.load();
  return set > 0 ? set : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// Every callback below that does more than return a constant runs its body through this (see
// ggml_guard.h): an exception becomes a logged error and the safe answer.
template <typename R, typename Body>
R guarded(const char* callback, R safe_answer, Body&& body) noexcept {
  return guard_callback(g_reg != nullptr ? &g_reg->logger : nullptr, callback, safe_answer,
                        std::forward<Body>(body));
}
template <typename Body>
void guarded_void(const char* callback, Body&& body) noexcept {
  guard_void_callback(g_reg != nullptr ? &g_reg->logger : nullptr, callback,
                      std::forward<Body>(body));
}

struct BackendContext {
  explicit BackendContext(RegContext& reg)
      : engine(*reg.device, reg.logger,
               MatmulEngineOptions{static_cast<size_t>(reg.knobs.integer("cache_mb")) * 1024 * 1024,
                                   reg.knobs.text("cache_policy") == "lru"
                                       ? EvictionPolicy::kLeastRecentlyUsed
                                       : EvictionPolicy::kFrequency,
                                   quant_path_from(reg.knobs.text("quant_path"))}),
        attention(*reg.device, reg.logger) {}
  MatmulEngine engine;
  FlashAttnEngine attention;
  int n_threads = 0;  // 0: the `threads` knob, else one per core
};

int resolve_threads(const BackendContext& ctx) {
  if (ctx.n_threads > 0) return ctx.n_threads;
  const int64_t knob = g_reg->knobs.integer("threads");
  if (knob > 0) return static_cast<int>(knob);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// ---- backend (stream) ----

const char* backend_get_name(ggml_backend_t) {
  return "NPUFLOW";
}

void backend_free(ggml_backend_t backend) {
  auto* ctx = static_cast<BackendContext*>(backend->context);
  guarded_void("free", [&] {
    if (g_reg->report) {
      const bool idle = g_reg->policy->mode() == OffloadMode::kIdle;
      // One write, so that llama.cpp's own log thread cannot split the block.
      std::string block =
          str_cat("npuflow: NPUFLOW backend (", idle ? "idle" : g_reg->device->name(),
                  ") stats: ", ctx->engine.summary(), ctx->attention.summary(), "\n");
      const std::string footprint = ctx->engine.footprint();
      if (!footprint.empty()) block += str_cat("npuflow: ", footprint, "\n");
      for (const std::string& line : g_reg->policy->summary()) {
        block += str_cat("npuflow: ", line, "\n");
      }
      for (const std::string& line : ctx->engine.routing_profile()) {
        block += str_cat("npuflow: ", line, "\n");
      }
      std::fwrite(block.data(), 1, block.size(), stderr);
      // On sim this is the modelled RK3588 time of every call so far (bench/llama_bench.sh
      // reads it).
      const std::string device_profile = g_reg->device->profile_report();
      // Its lines carry their own prefix ("npuflow sim profile: ...", "rocket: ...").
      std::fputs(device_profile.c_str(), stderr);
    }
  });
  delete ctx;
  delete backend;
}

ggml_status compute_graph(BackendContext* ctx, ggml_cgraph* graph) {
  throw_if_injected(FaultPoint::kGraphCompute);
  const ExecContext exec = openmp_exec_context(resolve_threads(*ctx));
  for (int i = 0; i < ggml_graph_n_nodes(graph); ++i) {
    ggml_tensor* node = ggml_graph_node(graph, i);
    if ((node->flags & GGML_TENSOR_FLAG_COMPUTE) == 0) continue;
    Status status = Status::ok();
    switch (node->op) {
      case GGML_OP_MUL_MAT:
        if (g_reg->fuse_matmuls) {
          const std::vector<int> group = shared_input_group(graph, i);
          std::vector<const ggml_tensor*> stacked;
          for (int at : group) stacked.push_back(ggml_graph_node(graph, at));
          status = ctx->engine.compute_stacked(stacked, exec);
          i = group.back();  // the nodes between are views: nothing to compute
        } else {
          status = ctx->engine.compute(node, exec);
        }
        break;
      case GGML_OP_MUL_MAT_ID:
        status = ctx->engine.compute_id(node, exec);
        break;
      case GGML_OP_FLASH_ATTN_EXT:
        status = ctx->attention.compute(node, exec);
        break;
      default:
        if (is_view_op(node->op)) break;
        g_reg->logger.error(
            str_cat("NPUFLOW was given op ", ggml_op_desc(node), " it never claims"));
        return GGML_STATUS_FAILED;
    }
    if (!status.is_ok()) {
      g_reg->logger.error(status.to_string());
      return GGML_STATUS_FAILED;
    }
  }
  return GGML_STATUS_SUCCESS;
}

ggml_status backend_graph_compute(ggml_backend_t backend, ggml_cgraph* graph) {
  return guarded("graph_compute", GGML_STATUS_FAILED, [&] {
    return compute_graph(static_cast<BackendContext*>(backend->context), graph);
  });
}

const ggml_backend_i kBackendInterface = {
    /* .get_name            = */ backend_get_name,
    /* .free                = */ backend_free,
    /* .set_tensor_async    = */ nullptr,
    /* .get_tensor_async    = */ nullptr,
    /* .set_tensor_2d_async = */ nullptr,
    /* .get_tensor_2d_async = */ nullptr,
    /* .cpy_tensor_async    = */ nullptr,
    /* .synchronize         = */ nullptr,
    /* .graph_plan_create   = */ nullptr,
    /* .graph_plan_free     = */ nullptr,
    /* .graph_plan_update   = */ nullptr,
    /* .graph_plan_compute  = */ nullptr,
    /* .graph_compute       = */ backend_graph_compute,
    /* .event_record        = */ nullptr,
    /* .event_wait          = */ nullptr,
    /* .graph_optimize      = */ nullptr,
};

ggml_guid_t backend_guid() {
  static ggml_guid guid = {0x6e, 0x70, 0x75, 0x66, 0x6c, 0x6f, 0x77, 0x2d,
                           0x67, 0x67, 0x6d, 0x6c, 0x2d, 0x30, 0x30, 0x31};
  return &guid;
}

void set_n_threads(ggml_backend_t backend, int n_threads) {
  guarded_void("set_n_threads", [&] {
    if (backend == nullptr || !ggml_guid_matches(backend->guid, backend_guid())) return;
    static_cast<BackendContext*>(backend->context)->n_threads = n_threads;
    if (n_threads > 0) g_threads.store(n_threads);
  });
}

void get_stats(ggml_npuflow_stats* out) {
  guarded_void("get_stats", [&] {
    if (out != nullptr) *out = counters().snapshot();
  });
}
void reset_stats() {
  guarded_void("reset_stats", [] { counters().reset(); });
}

// Test hooks of the cost policy: the identity a cost table must carry to be read here, and
// switching to another table file (every decision so far forgotten).
const char* cost_identity_hook() {
  return guarded("cost_identity", static_cast<const char*>(nullptr), [] {
    static std::string identity;
    identity = g_reg->policy->identity();
    return identity.c_str();
  });
}
void use_cost_table_hook(const char* path) {
  guarded_void("use_cost_table", [&] { g_reg->policy->use_table(path != nullptr ? path : ""); });
}

// ---- device ----

const char* device_get_name(ggml_backend_dev_t) {
  return "NPUFLOW";
}
const char* device_get_description(ggml_backend_dev_t) {
  return g_reg->description.c_str();
}
void device_get_memory(ggml_backend_dev_t, size_t* free, size_t* total) {
  *free = 0;  // host memory: nothing of its own to report
  *total = 0;
}
enum ggml_backend_dev_type device_get_type(ggml_backend_dev_t) {
  return GGML_BACKEND_DEVICE_TYPE_ACCEL;
}

void device_get_props(ggml_backend_dev_t dev, ggml_backend_dev_props* props) {
  guarded_void("get_props", [&] {
    props->name = device_get_name(dev);
    props->description = device_get_description(dev);
    props->type = device_get_type(dev);
    device_get_memory(dev, &props->memory_free, &props->memory_total);
    props->caps.async = false;
    props->caps.host_buffer = false;
    props->caps.buffer_from_host_ptr = true;
    props->caps.events = false;
    props->caps.mmap_support = true;
  });
}

ggml_backend_t device_init_backend(ggml_backend_dev_t dev, const char*) {
  return guarded("init_backend", ggml_backend_t{nullptr}, [&] {
    auto context = std::make_unique<BackendContext>(*g_reg);
    auto* backend = new ggml_backend{backend_guid(), kBackendInterface, dev, context.get()};
    context.release();
    return backend;
  });
}

ggml_backend_buffer_type_t device_get_buffer_type(ggml_backend_dev_t) {
  return guarded("get_buffer_type", ggml_backend_buffer_type_t{nullptr},
                 [] { return ggml_backend_cpu_buffer_type(); });
}

ggml_backend_buffer_t device_buffer_from_host_ptr(ggml_backend_dev_t, void* ptr, size_t size,
                                                  size_t) {
  return guarded("buffer_from_host_ptr", ggml_backend_buffer_t{nullptr},
                 [&] { return ggml_backend_cpu_buffer_from_ptr(ptr, size); });
}

// supports_op's answer for an op the routing rules accepted or refused (`verdict`) that
// claim=faster has no measured cost for (`what`: experts, attention): taken only where every claim
// is (claim=all), with a trace line saying why not otherwise.
bool take_unmeasured(const ggml_tensor* op, const std::string& description,
                     const RouteVerdict& verdict, const char* what) {
  const bool take = verdict.accept && g_reg->policy->mode() == OffloadMode::kAll;
  if (g_reg->logger.enabled(LogLevel::kTrace)) {
    const std::string answer = take ? std::string("yes")
                               : verdict.accept
                                   ? str_cat("declined (", offload_mode_name(g_reg->policy->mode()),
                                             ": no cost is measured for ", what, ")")
                                   : std::string(verdict.reason);
    g_reg->logger.trace(str_cat("supports_op ", ggml_op_name(op->op), " '", op->name, "' ",
                                description, " -> ", answer));
  }
  return take;
}

bool supports_op(const ggml_tensor* op) {
  if (is_view_op(op->op)) return g_reg->policy->mode() != OffloadMode::kIdle;  // idle: no op
  switch (op->op) {
    case GGML_OP_MUL_MAT: {
      throw_if_injected(FaultPoint::kSupportsOp);
      const MatmulCandidate candidate = describe_mul_mat(op);
      const RouteVerdict verdict = route_matmul(candidate, g_reg->routing);
      const bool take = verdict.accept && g_reg->policy->take(op, candidate, cpu_backend_threads());
      counters().count_supports(take, /*declined=*/verdict.accept && !take);
      if (g_reg->logger.enabled(LogLevel::kTrace)) {
        const std::string answer =
            take             ? std::string("yes")
            : verdict.accept ? str_cat("declined (", offload_mode_name(g_reg->policy->mode()), ")")
                             : std::string(verdict.reason);
        g_reg->logger.trace(
            str_cat("supports_op MUL_MAT '", op->name, "' ", describe(candidate), " -> ", answer));
      }
      return take;
    }
    case GGML_OP_MUL_MAT_ID: {
      throw_if_injected(FaultPoint::kSupportsOp);
      const MatmulCandidate candidate = describe_mul_mat_id(op);
      const bool take = take_unmeasured(op, describe(candidate),
                                        route_matmul(candidate, g_reg->routing), "experts");
      counters().count_supports_mul_mat_id(take);
      return take;
    }
    case GGML_OP_FLASH_ATTN_EXT: {
      throw_if_injected(FaultPoint::kSupportsOp);
      const FlashAttentionCandidate candidate = describe_flash_attn(op);
      const bool take =
          take_unmeasured(op, describe(candidate),
                          route_flash_attention(candidate, g_reg->attention_routing), "attention");
      counters().count_supports_flash_attn(take);
      return take;
    }
    default:
      return false;
  }
}

// A guarded no leaves the op to the CPU backend.
bool device_supports_op(ggml_backend_dev_t, const ggml_tensor* op) {
  return guarded("supports_op", false, [&] { return supports_op(op); });
}

bool device_supports_buft(ggml_backend_dev_t, ggml_backend_buffer_type_t buft) {
  // Host buffers (CPU, CPU_Mapped for mmapped GGUFs) are read in place; CPU_REPACK is not host.
  return guarded("supports_buft", false, [&] { return ggml_backend_buft_is_host(buft); });
}

const ggml_backend_device_i kDeviceInterface = {
    /* .get_name             = */ device_get_name,
    /* .get_description      = */ device_get_description,
    /* .get_memory           = */ device_get_memory,
    /* .get_type             = */ device_get_type,
    /* .get_props            = */ device_get_props,
    /* .init_backend         = */ device_init_backend,
    /* .get_buffer_type      = */ device_get_buffer_type,
    /* .get_host_buffer_type = */ nullptr,
    /* .buffer_from_host_ptr = */ device_buffer_from_host_ptr,
    /* .supports_op          = */ device_supports_op,
    /* .supports_buft        = */ device_supports_buft,
    /* .offload_op           = */ nullptr,
    /* .event_new            = */ nullptr,
    /* .event_free           = */ nullptr,
    /* .event_synchronize    = */ nullptr,
};

// ---- reg ----

const char* reg_get_name(ggml_backend_reg_t) {
  return "NPUFLOW";
}
size_t reg_get_device_count(ggml_backend_reg_t) {
  return 1;
}

ggml_backend_dev_t reg_get_device(ggml_backend_reg_t reg, size_t index) {
  // An index past the one device is answered with null, not an assertion that aborts the host.
  if (index != 0) return nullptr;
  static ggml_backend_device device = {kDeviceInterface, reg, nullptr};
  return &device;
}

void* reg_get_proc_address(ggml_backend_reg_t, const char* name) {
  if (std::strcmp(name, "ggml_backend_set_n_threads") == 0) {
    return reinterpret_cast<void*>(&set_n_threads);
  }
  if (std::strcmp(name, "ggml_backend_npuflow_get_stats") == 0) {
    return reinterpret_cast<void*>(&get_stats);
  }
  if (std::strcmp(name, "ggml_backend_npuflow_reset_stats") == 0) {
    return reinterpret_cast<void*>(&reset_stats);
  }
  if (std::strcmp(name, "ggml_backend_npuflow_inject_fault") == 0) {
    return reinterpret_cast<void*>(&inject_fault);
  }
  if (std::strcmp(name, "ggml_backend_npuflow_cost_identity") == 0) {
    return reinterpret_cast<void*>(&cost_identity_hook);
  }
  if (std::strcmp(name, "ggml_backend_npuflow_use_cost_table") == 0) {
    return reinterpret_cast<void*>(&use_cost_table_hook);
  }
  return nullptr;
}

const ggml_backend_reg_i kRegInterface = {
    /* .get_name         = */ reg_get_name,
    /* .get_device_count = */ reg_get_device_count,
    /* .get_device       = */ reg_get_device,
    /* .get_proc_address = */ reg_get_proc_address,
};

// claim=faster's measurement of one shape: the CPU backend against a private MatmulEngine on this
// device (its resident weight is dropped afterwards; its runs are not counted in the stats).
Result<MatmulCost> measure_on(RegContext& reg, ggml_type type, const MatmulCostKey& key) {
  MatmulEngine engine(*reg.device, reg.logger,
                      MatmulEngineOptions{0, EvictionPolicy::kFrequency,
                                          quant_path_from(reg.knobs.text("quant_path")), false});
  const ExecContext exec = openmp_exec_context(key.threads);
  auto cost = measure_mul_mat(ProbeShape{type, key.k, key.n, key.rows, key.threads},
                              [&](const ggml_tensor* node) { return engine.compute(node, exec); });
  if (cost.is_ok() && engine.fallbacks() > 0) {
    return unsupported(
        str_cat("device ", reg.device->name(), " fell back to the host reference on the probe"));
  }
  return cost;
}

// Resolves the knobs and creates the device once. Null (with the reason on stderr) when a knob
// is invalid or the device cannot be created: the loader then rejects the library loudly.
RegContext* create_reg_context() {
  auto ctx = std::make_unique<RegContext>();
  auto knobs = Knobs::resolve(nullptr);
  if (!knobs.is_ok()) {
    std::fprintf(stderr, "npuflow: %s\n", knobs.status().message().c_str());
    return nullptr;
  }
  ctx->knobs = knobs.value();
  ctx->logger.set_threshold(ctx->knobs.log_level());
  auto device = create_device(device_config_from(ctx->knobs));
  if (!device.is_ok()) {
    std::fprintf(stderr, "npuflow: %s\n", device.status().message().c_str());
    return nullptr;
  }
  ctx->device = std::move(device.value().device);
  ctx->routing.min_m = ctx->knobs.integer("min_m");
  ctx->routing.min_m_quant = ctx->knobs.integer("min_m_quant");
  ctx->attention_routing.min_kv = ctx->knobs.integer("fa_min_kv");
  ctx->attention_routing.min_tokens = ctx->routing.min_m;
  // Stacking saves a device call and costs a copy of the outputs: worth it where a call costs a
  // submit (an NPU), not on host (docs/ggml-backend.md has both measured).
  const std::string& fuse = ctx->knobs.text("fuse_matmuls");
  ctx->fuse_matmuls = fuse == "on" || (fuse == "auto" && ctx->device->name() != "host");
  ctx->report = ctx->knobs.flag("prof") || ctx->logger.enabled(LogLevel::kInfo);
  // device=auto resolving to the host means no usable NPU: the CPU backend already is the host.
  const bool idle = ctx->knobs.text("device") == "auto" && ctx->device->name() == "host";
  const OffloadMode mode = idle ? OffloadMode::kIdle
                           : resolve_ggml_claim_policy(ctx->knobs.text("claim"),
                                                       ctx->device->name()) == ClaimPolicy::kFaster
                               ? OffloadMode::kFaster
                               : OffloadMode::kAll;
  RegContext* reg = ctx.get();
  ctx->policy = std::make_unique<OffloadPolicy>(
      mode, ctx->knobs.text("ggml_costs"),
      // The quantized path changes what a quantized weight costs: each has its own table.
      [reg] {
        return cost_identity(
            str_cat(reg->device->description(), ", quant_path=", reg->knobs.text("quant_path")));
      },
      [reg](ggml_type type, const MatmulCostKey& key) { return measure_on(*reg, type, key); },
      ctx->logger);
  if (idle) {
    ctx->logger.verbose(device.value().reason);
    ctx->description = str_cat("npuflow ", NPUFLOW_VERSION,
                               " idle (no NPU found; NPUFLOW_DEVICE=host or sim runs it)");
    ctx->logger.info(
        "no NPU found: NPUFLOW stays idle (set NPUFLOW_DEVICE=host or sim to run it anyway)");
    return ctx.release();
  }
  ctx->logger.info(device.value().reason);
  ctx->description = str_cat("npuflow ", NPUFLOW_VERSION, " on ", ctx->device->description());
  ctx->logger.info(str_cat(
      "NPUFLOW device ready: ", ctx->description, "; MUL_MAT offload from M>=", ctx->routing.min_m,
      " (float weights), M>=", ctx->routing.min_m_quant, " (quantized); FLASH_ATTN_EXT from n_kv>=",
      ctx->attention_routing.min_kv, " and ", ctx->attention_routing.min_tokens, " query rows",
      mode == OffloadMode::kAll ? "" : " (claim=all only)", "; claim=", offload_mode_name(mode)));
  return ctx.release();
}

ggml_backend_reg_t reg_get() {
  static ggml_backend_reg reg = {GGML_BACKEND_API_VERSION, kRegInterface, nullptr};
  static bool ready = (g_reg = guarded("backend_init", static_cast<RegContext*>(nullptr),
                                       create_reg_context)) != nullptr;
  return ready ? &reg : nullptr;
}

}  // namespace
}  // namespace npuflow::ggml

extern "C" __attribute__((visibility("default"))) ggml_backend_reg_t ggml_backend_init(void) {
  return npuflow::ggml::reg_get();
}
