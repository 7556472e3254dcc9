#include "sim/cost_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>

#include "core/strings.h"
#include "sim/board_cpu_model.h"

namespace npuflow::sim {
namespace {

// The one table. tools/calibrate_sim.py regenerates the rows it knows from a board's CSV; keep
// one constant per line in this exact shape.
// clang-format off
constexpr std::array kConstants = {
    CostConstant{"submit_wait_floor_us", 34.0, "us", 'M', "rk3588-npu.md §3 Dispatch: tiny one-task submit+wait, patch 083 (IOMMU keep-attached) 54->34 us"},
    CostConstant{"submit_wait_floor_stock_us", 52.5, "us", 'M', "rk3588-npu.md §3 Dispatch: stock kernel, IRQ on the A55, 51-54 us"},
    CostConstant{"resident_gops_fp16", 461.0, "GOP/s", 'M', "rk3588-npu.md §3 Throughput at 600 MHz: resident, 5 fds, 512x3840x4096, fp16"},
    CostConstant{"resident_gops_int8", 386.0, "GOP/s", 'M', "rk3588-npu.md §3 Throughput at 600 MHz: resident, 5 fds, 512x3840x4096, int8"},
    CostConstant{"resident_gops_int4", 413.0, "GOP/s", 'M', "rk3588-npu.md §3 Throughput at 600 MHz: resident, 5 fds, 512x3840x4096, int4"},
    CostConstant{"calibration_m", 512, "rows", 'M', "rk3588-npu.md §3 Throughput: the shape behind resident_gops_* (M x K x N in the library's argument order [U])"},
    CostConstant{"calibration_k", 3840, "elements", 'M', "rk3588-npu.md §3 Throughput: 512x3840x4096"},
    CostConstant{"calibration_n", 4096, "elements", 'M', "rk3588-npu.md §3 Throughput: 512x3840x4096"},
    CostConstant{"calibration_workers", 5, "fds", 'M', "rk3588-npu.md §3 Throughput: resident, 5 fds"},
    CostConstant{"fd_scaling_2", 2.13, "x", 'U', "rk3588-npu.md §3 Throughput: threads 1/2/3/4, one fd each: 2.13x at 2 (RU multicore_threads.c; probably 200 MHz)"},
    CostConstant{"fd_scaling_3", 2.94, "x", 'U', "rk3588-npu.md §3 Throughput: 2.94x at 3 fds (as above)"},
    CostConstant{"fd_scaling_4", 3.06, "x", 'U', "rk3588-npu.md §3 Throughput: 3.06x at 4 fds; 5 or more fds are taken as 4 (3 cores)"},
    CostConstant{"pack_gbps", 0.9, "GB/s", 'M', "rk3588-npu.md §3 Memory: host pack ~0.9 GB/s (gather/index-bound)"},
    CostConstant{"readback_gbps", 0.4, "GB/s", 'M', "rk3588-npu.md §3 Memory: host readback ~0.4 GB/s"},
    CostConstant{"host_pack_threads", 4, "threads", 'A', "assumption: per-fd workers pack and read back in parallel on at most the 4 A76 cores"},
    CostConstant{"call_overhead_us", 127.2, "us", 'F', "fitted: seed 000 mmBERT-base, 58 tokens, 1.12x (tools/validate_sim.py --fit); a fixed host cost per in-model call that the calibration shapes do not separate (regcmd build, BO sync, IOMMU attach) [U]"},
    CostConstant{"attention_penalty", 2.7, "x", 'M', "rk3588-npu.md §3 Pools and attention: projections ~2.7x more efficient per MAC than attention score matmuls"},
    CostConstant{"gemv_slowdown_vs_cpu", 82.0, "x", 'M', "rk3588-npu.md §3 Throughput: GEMV (M=1) ~82x slower than CPU (NN decode-gemv.md)"},
    CostConstant{"cpu_fp16_gflops", 113.0, "GFLOP/s", 'D', "rk3588-npu.md §3 CPU: Gemma-12B F16 prefill, 8 threads, ~4.7 t/s -> 2 x 12e9 x 4.7"},
    CostConstant{"cpu_int8_gops", 282.0, "GOP/s", 'A', "assumption: A76 SDOT int8 GEMM at 2.5x the fp16 rate"},
    CostConstant{"cpu_int4_gops", 282.0, "GOP/s", 'A', "assumption: int4 unpacked to int8 on the CPU, same rate as int8"},
    CostConstant{"cpu_stream_gbps", 17.0, "GB/s", 'M', "rk3588-npu.md §3 Memory: LPDDR streaming ~17 GB/s (bounds a CPU GEMV)"},
};
// clang-format on

int64_t input_bytes(NpuType type) {
  return type == NpuType::kFp16 ? 2 : 1;
}

int64_t default_output_bytes(NpuType type) {
  return type == NpuType::kFp16 ? 2 : 4;
}

const char* resident_name(NpuType type) {
  switch (type) {
    case NpuType::kFp16:
      return "resident_gops_fp16";
    case NpuType::kInt8:
      return "resident_gops_int8";
    case NpuType::kInt4:
      return "resident_gops_int4";
  }
  return "";
}

// Everything but the compute term, with the compute rate left out.
struct Overheads {
  CostEstimate estimate;
  int active_workers = 1;
};

Overheads overheads(const CostQuery& q) {
  const ShapeContract& c = contract_for(q.type);
  const int64_t m = round_up(std::max<int64_t>(q.m, 1), c.m_multiple);
  const int64_t k = round_up(q.k, c.k_multiple);
  const int64_t n = round_up(q.n, c.n_multiple);
  Overheads o;
  CostEstimate& e = o.estimate;
  e.ops = 2 * q.m * q.n * q.k;
  auto slices = plan_workers(q.type, m, k, n, std::clamp(q.workers, 1, kMaxWorkers));
  if (slices.is_ok()) {
    for (const WorkerSlice& slice : slices.value()) {
      e.tiles += slice.plan.tiles();
      e.jobs += slice.plan.jobs();
      e.serial_jobs = std::max(e.serial_jobs, slice.plan.jobs());
    }
    o.active_workers = static_cast<int>(slices.value().size());
  }
  const int64_t out_bytes = q.output_bytes > 0 ? q.output_bytes : default_output_bytes(q.type);
  e.bytes_packed = m * k * input_bytes(q.type) + (q.resident ? 0 : k * n * input_bytes(q.type));
  e.bytes_read_back = m * n * out_bytes;
  const double floor_us =
      cost_constant(q.patched_kernel ? "submit_wait_floor_us" : "submit_wait_floor_stock_us");
  e.device_us = static_cast<double>(e.serial_jobs) * floor_us;
  const double threads = std::min<double>(o.active_workers, cost_constant("host_pack_threads"));
  e.host_us = (static_cast<double>(e.bytes_packed) / (cost_constant("pack_gbps") * 1e3) +
               static_cast<double>(e.bytes_read_back) / (cost_constant("readback_gbps") * 1e3)) /
                  threads +
              cost_constant("call_overhead_us");
  return o;
}

CostQuery calibration_query(NpuType type) {
  CostQuery q;
  q.type = type;
  q.m = static_cast<int64_t>(cost_constant("calibration_m"));
  q.k = static_cast<int64_t>(cost_constant("calibration_k"));
  q.n = static_cast<int64_t>(cost_constant("calibration_n"));
  q.workers = static_cast<int>(cost_constant("calibration_workers"));
  return q;
}

}  // namespace

std::span<const CostConstant> cost_constants() {
  return kConstants;
}

namespace {
std::map<std::string, double, std::less<>>& overrides() {
  static std::map<std::string, double, std::less<>> table;
  return table;
}
}  // namespace

bool override_constant(std::string_view name, double value) {
  bool known = false;
  for (std::span<const CostConstant> table : {cost_constants(), board_cpu_constants()}) {
    for (const CostConstant& c : table) known = known || name == c.name;
  }
  if (known) overrides()[std::string(name)] = value;
  return known;
}

std::optional<double> constant_override(std::string_view name) {
  const auto& table = overrides();
  if (table.empty()) return std::nullopt;
  auto it = table.find(name);
  return it == table.end() ? std::nullopt : std::optional<double>(it->second);
}

double cost_constant(std::string_view name) {
  if (auto value = constant_override(name)) return *value;
  for (const CostConstant& c : kConstants) {
    if (name == c.name) return c.value;
  }
  throw std::logic_error(str_cat("unknown cost constant ", name));
}

double CostModel::fd_scaling(int workers) {
  if (workers <= 1) return 1.0;
  if (workers == 2) return cost_constant("fd_scaling_2");
  if (workers == 3) return cost_constant("fd_scaling_3");
  return cost_constant("fd_scaling_4");
}

double CostModel::core_gops(NpuType type) {
  // The measured figure is total time; take the model's overheads on that shape out of it.
  const CostQuery q = calibration_query(type);
  const Overheads o = overheads(q);
  const double measured_us =
      static_cast<double>(o.estimate.ops) / (cost_constant(resident_name(type)) * 1e3);
  const double compute_us = measured_us - o.estimate.device_us - o.estimate.host_us;
  return static_cast<double>(o.estimate.ops) / compute_us / 1e3 / fd_scaling(o.active_workers);
}

double CostModel::cpu_us(NpuType type, int64_t m, int64_t k, int64_t n) {
  const double ops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const double gops = type == NpuType::kFp16   ? cost_constant("cpu_fp16_gflops")
                      : type == NpuType::kInt8 ? cost_constant("cpu_int8_gops")
                                               : cost_constant("cpu_int4_gops");
  const double compute_us = ops / (gops * 1e3);
  // The weight streams from DRAM at least once.
  const double weight_us =
      static_cast<double>(k * n * input_bytes(type)) / (cost_constant("cpu_stream_gbps") * 1e3);
  return std::max(compute_us, weight_us);
}

CostEstimate CostModel::npu(const CostQuery& query) {
  Overheads o = overheads(query);
  CostEstimate e = o.estimate;
  double compute_us =
      static_cast<double>(e.ops) / (core_gops(query.type) * 1e3 * fd_scaling(o.active_workers));
  if (query.kind == GemmKind::kAttentionScore) compute_us *= cost_constant("attention_penalty");
  e.device_us += compute_us;
  if (query.m < 4) {
    // GEMV: the measured end-to-end slowdown against the CPU replaces the mechanism.
    e.gemv = true;
    const double total =
        cost_constant("gemv_slowdown_vs_cpu") * cpu_us(query.type, query.m, query.k, query.n);
    e.host_us = std::min(e.host_us, total);
    e.device_us = total - e.host_us;
  }
  return e;
}

namespace {

// An fp16 GEMM whose operands are both packed on the call (attention, convolution).
CostQuery unpacked_fp16(int64_t m, int64_t k, int64_t n, int workers, bool patched_kernel,
                        GemmKind kind) {
  CostQuery query;
  query.type = NpuType::kFp16;
  query.m = m;
  query.k = k;
  query.n = n;
  query.workers = workers;
  query.resident = false;
  query.kind = kind;
  query.patched_kernel = patched_kernel;
  return query;
}

}  // namespace

CostEstimate CostModel::attention(int64_t tokens, int64_t kv, int64_t head_dim, int64_t dv,
                                  int64_t heads, int workers, bool patched_kernel,
                                  int64_t bias_bytes) {
  CostEstimate total;
  auto add = [&](int64_t m, int64_t k, int64_t n) {
    const CostEstimate e =
        npu(unpacked_fp16(m, k, n, workers, patched_kernel, GemmKind::kAttentionScore));
    const auto h = static_cast<double>(heads);
    total.device_us += e.device_us * h;
    total.host_us += e.host_us * h;
    total.tiles += e.tiles * heads;
    total.jobs += e.jobs * heads;
    total.serial_jobs += e.serial_jobs * heads;
    total.bytes_packed += e.bytes_packed * heads;
    total.bytes_read_back += e.bytes_read_back * heads;
    total.ops += e.ops * heads;
  };
  add(tokens, head_dim, kv);
  add(tokens, kv, dv);
  const double pack_threads =
      std::min<double>(std::clamp(workers, 1, kMaxWorkers), cost_constant("host_pack_threads"));
  total.bytes_packed += bias_bytes;
  total.host_us +=
      static_cast<double>(bias_bytes) / (cost_constant("pack_gbps") * 1e3) / pack_threads;
  return total;
}

CostEstimate CostModel::convolution(int64_t m, int64_t k, int64_t n, int workers,
                                    bool patched_kernel) {
  return npu(unpacked_fp16(m, k, n, workers, patched_kernel, GemmKind::kProjection));
}

std::string CostModel::describe() {
  std::string text;
  for (const CostConstant& c : kConstants) {
    text += str_cat(c.name, " = ", c.value, " ", c.unit, " [", c.tag, "] ", c.source, "\n");
  }
  for (NpuType type : {NpuType::kFp16, NpuType::kInt8, NpuType::kInt4}) {
    text += str_cat("core_gops_", npu_type_name(type), " = ", core_gops(type),
                    " GOP/s [D] derived: reproduces ", resident_name(type),
                    " on the calibration shape\n");
  }
  return text;
}

}  // namespace npuflow::sim
