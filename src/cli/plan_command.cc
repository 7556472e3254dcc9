// `npuflow plan model.onnx`: what the EP would claim in a model, priced on the RK3588 by the
// simulator's cost model (NPU time per claimed GEMM, modelled A76 time for the same work and for
// what stays on the CPU), beside this machine's measured CPU EP time. The claims come from a real
// session's report, so the plan shows what the EP does.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <set>

#include "cli/commands.h"
#include "cli/ort_session.h"
#include "cli/png_chart.h"
#include "core/strings.h"
#include "graph/claim_report.h"
#include "sim/cost_model.h"

namespace npuflow::cli {
namespace {

// One claimed subgraph (or one GEMM left to the CPU), its GEMMs priced and summed.
struct PricedGemm {
  std::string subgraph;
  std::string name;
  int64_t m = 0, k = 0, n = 0;  // of the single GEMM; 0 when the subgraph has several
  int gemms = 0;
  int64_t macs = 0;
  sim::NpuType type = sim::NpuType::kFp16;
  double npu_ms = 0;  // simulated device + host-side packing/readback
  double cpu_ms = 0;  // modelled RK3588 CPU
  int64_t resident_bytes = 0;
};

constexpr int64_t kMaxGemmDim = int64_t{1} << 20;

sim::NpuType npu_type_for(const std::string& element_type) {
  return element_type == "int8" || element_type == "uint8" ? sim::NpuType::kInt8
                                                           : sim::NpuType::kFp16;
}

PricedGemm price(const std::string& subgraph, const JsonValue& work, int64_t default_rows,
                 int workers, bool on_npu) {
  PricedGemm g;
  g.subgraph = subgraph;
  g.name = work["name"].string();
  const int64_t rows = work["rows"].integer();
  g.m = rows > 0 ? rows : default_rows;
  g.k = work["k"].integer();
  g.n = work["n"].integer();
  // The EP writes positive sizes only; anything else (a damaged or foreign report) is not a GEMM
  // to price, and the cap keeps M*K*N inside int64.
  if (g.m > kMaxGemmDim || g.k <= 0 || g.n <= 0 || g.k > kMaxGemmDim || g.n > kMaxGemmDim) {
    return g;  // gemms == 0: not priced
  }
  g.type = npu_type_for(work["type"].string());
  g.gemms = 1;
  g.macs = g.m * g.k * g.n;
  g.cpu_ms = sim::CostModel::cpu_us(g.type, g.m, g.k, g.n) / 1e3;
  const bool attention = work["attention"].boolean();
  if (on_npu) {
    sim::CostQuery query;
    query.type = g.type;
    query.m = g.m;
    query.k = g.k;
    query.n = g.n;
    query.workers = workers;
    query.resident = !attention;  // both attention operands are activations
    query.kind = attention ? sim::GemmKind::kAttentionScore : sim::GemmKind::kProjection;
    g.npu_ms = sim::CostModel::npu(query).total_us() / 1e3;
    if (!attention) g.resident_bytes = g.k * g.n * (g.type == sim::NpuType::kInt8 ? 1 : 2);
  }
  return g;
}

void accumulate(PricedGemm& total, const PricedGemm& part) {
  if (part.gemms == 0) return;
  if (total.gemms == 0) {
    total = part;
    return;
  }
  total.m = total.k = total.n = 0;
  total.gemms += part.gemms;
  total.macs += part.macs;
  total.npu_ms += part.npu_ms;
  total.cpu_ms += part.cpu_ms;
  total.resident_bytes += part.resident_bytes;
}

double measure_cpu_ep_ms(OrtHarness& harness, const SessionConfig& config, int64_t rows, int runs) {
  Ort::Session cpu = harness.cpu_session(config);
  InputSet inputs = make_inputs(cpu, rows, 7);
  const std::vector<std::string> outputs = output_names(cpu);
  run(cpu, inputs, outputs);  // warm-up
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run(cpu, inputs, outputs);
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(ms);
}

}  // namespace

int plan_command(const std::vector<std::string>& args) {
  SessionConfig config;
  std::string ep_library = default_ep_library();
  PlanOptions options;
  std::string& plot_path = options.plot_path;
  bool& json = options.json;
  int64_t& rows = options.rows;
  int& workers = options.workers;
  int& runs = options.runs;
  const int usage = parse_model_command(
      "plan",
      "plan MODEL.onnx [--rows N] [--workers N] [--runs N] [--json] [--plot OUT.png] [--opt LEVEL]",
      args, config, ep_library, [&](size_t& i) {
        const bool has_value = i + 1 < args.size();
        if (args[i] == "--json") {
          json = true;
        } else if (args[i] == "--plot" && has_value) {
          plot_path = args[++i];
        } else if (args[i] == "--rows" && has_value) {
          rows = std::clamp<int64_t>(std::atoll(args[++i].c_str()), 1, kMaxGemmDim);
        } else if (args[i] == "--workers" && has_value) {
          workers = std::clamp(std::atoi(args[++i].c_str()), 1, 8);
        } else if (args[i] == "--runs" && has_value) {
          runs = std::max(0, std::atoi(args[++i].c_str()));
        } else {
          return false;
        }
        return true;
      });
  if (usage >= 0) return usage;
  OrtHarness harness(ep_library);
  return plan_report(&harness, config, options, claim_report(harness, config, "plan"));
}

int plan_report(OrtHarness* harness, const SessionConfig& config, const PlanOptions& options,
                const std::vector<JsonValue>& graphs) {
  const auto& [plot_path, json, rows, workers, runs] = options;

  std::vector<PricedGemm> claimed, host;
  std::set<std::string> graphs_seen;  // each matcher writes a record; host work is per graph
  for (const JsonValue& graph : graphs) {
    for (const JsonValue& claim : graph["claims"].array()) {
      PricedGemm total;
      for (const JsonValue& work : claim["work"].array()) {
        accumulate(total, price(claim["node"].string(), work, rows, workers, true));
      }
      total.subgraph = claim["node"].string();
      if (total.gemms > 0) claimed.push_back(total);
    }
    if (!graphs_seen.insert(graph["graph"].string()).second) continue;
    for (const JsonValue& work : graph["host_gemms"].array()) {
      if (PricedGemm g = price("(CPU)", work, rows, workers, false); g.gemms > 0) host.push_back(g);
    }
  }
  double npu_ms = 0, claimed_cpu_ms = 0, host_cpu_ms = 0;
  int64_t resident = 0, device_macs = 0, host_macs = 0;
  for (const PricedGemm& g : claimed) {
    npu_ms += g.npu_ms;
    claimed_cpu_ms += g.cpu_ms;
    resident += g.resident_bytes;
    device_macs += g.macs;
  }
  for (const PricedGemm& g : host) {
    host_cpu_ms += g.cpu_ms;
    host_macs += g.macs;
  }
  const double board_with_npu = npu_ms + host_cpu_ms;
  const double board_cpu_only = claimed_cpu_ms + host_cpu_ms;
  const double speedup = board_with_npu > 0 ? board_cpu_only / board_with_npu : 1.0;
  const double iova_per_fd_mib = static_cast<double>(resident) / workers / (1024.0 * 1024.0);
  const double cpu_ep_ms =
      runs > 0 && harness != nullptr ? measure_cpu_ep_ms(*harness, config, rows, runs) : 0.0;

  if (json) {
    std::string items;
    for (const PricedGemm& g : claimed) {
      items += str_cat(items.empty() ? "" : ",", "{\"subgraph\":\"", json_escape(g.subgraph),
                       "\",\"gemm\":\"", json_escape(g.name), "\",\"type\":\"",
                       sim::npu_type_name(g.type), "\",\"m\":", g.m, ",\"k\":", g.k, ",\"n\":", g.n,
                       ",\"npu_ms\":", g.npu_ms, ",\"cpu_ms\":", g.cpu_ms,
                       ",\"resident_bytes\":", g.resident_bytes, "}");
    }
    std::printf(
        "{\"model\":\"%s\",\"rows\":%lld,\"workers\":%d,\"claimed\":[%s],\"device_macs\":%lld,"
        "\"host_macs\":%lld,\"npu_ms\":%.6f,\"host_cpu_ms\":%.6f,\"board_with_npu_ms\":%.6f,"
        "\"board_cpu_only_ms\":%.6f,\"projected_speedup\":%.6f,\"resident_bytes\":%lld,"
        "\"iova_per_fd_mib\":%.3f,\"iova_budget_mib\":%.0f,\"this_machine_cpu_ep_ms\":%.6f}\n",
        json_escape(config.model_path).c_str(), static_cast<long long>(rows), workers,
        items.c_str(), static_cast<long long>(device_macs), static_cast<long long>(host_macs),
        npu_ms, host_cpu_ms, board_with_npu, board_cpu_only, speedup,
        static_cast<long long>(resident), iova_per_fd_mib,
        static_cast<double>(sim::kIovaBytesPerFd) / (1024.0 * 1024.0), cpu_ep_ms);
  } else {
    std::printf(
        "npuflow plan: %s (rows=%lld for symbolic dimensions; RK3588 NPU at 600 MHz, %d "
        "worker fds, simulated)\n",
        config.model_path.c_str(), static_cast<long long>(rows), workers);
    std::printf("  %-24s %-5s %5s %6s %6s %6s %10s %12s %10s %10s %8s\n", "subgraph", "type",
                "GEMMs", "M", "K", "N", "MMACs", "resident KiB", "NPU ms", "A76 ms", "speedup");
    for (const PricedGemm& g : claimed) {
      auto dim = [&](int64_t v) { return g.gemms == 1 ? std::to_string(v) : std::string("-"); };
      std::printf("  %-24s %-5s %5d %6s %6s %6s %10.1f %12lld %10.3f %10.3f %7.2fx\n",
                  g.subgraph.substr(0, 24).c_str(), sim::npu_type_name(g.type), g.gemms,
                  dim(g.m).c_str(), dim(g.k).c_str(), dim(g.n).c_str(), g.macs / 1e6,
                  static_cast<long long>(g.resident_bytes / 1024), g.npu_ms, g.cpu_ms,
                  g.npu_ms > 0 ? g.cpu_ms / g.npu_ms : 0.0);
    }
    std::printf("  left on the CPU: %zu GEMMs, %.1f MMACs, modelled A76 %.3f ms\n", host.size(),
                host_macs / 1e6, host_cpu_ms);
    std::printf(
        "  device MACs %.1f M, host MACs %.1f M; resident weights %.2f MiB (%.2f MiB per "
        "fd of a %.0f MiB IOVA window)\n",
        device_macs / 1e6, host_macs / 1e6, resident / (1024.0 * 1024.0), iova_per_fd_mib,
        static_cast<double>(sim::kIovaBytesPerFd) / (1024.0 * 1024.0));
    std::printf(
        "  RK3588 projected: %.3f ms with npuflow (NPU %.3f + CPU %.3f) vs %.3f ms "
        "CPU only: %.2fx\n",
        board_with_npu, npu_ms, host_cpu_ms, board_cpu_only, speedup);
    if (runs > 0) {
      std::printf(
          "  this machine, CPU EP: %.3f ms per run (median of %d; for reference, not a "
          "board figure)\n",
          cpu_ep_ms, runs);
    }
  }
  if (!plot_path.empty()) {
    std::vector<ChartRow> chart;
    for (const PricedGemm& g : claimed) chart.push_back({g.subgraph, {g.npu_ms, g.cpu_ms}});
    if (!host.empty()) chart.push_back({"left on CPU", {0.0, host_cpu_ms}});
    char projected[32];
    std::snprintf(projected, sizeof(projected), "%.2fx", speedup);
    const std::string title =
        str_cat("npuflow plan: ", std::filesystem::path(config.model_path).filename().string(),
                ": RK3588 projected ", projected);
    Status status = write_bar_chart_png(
        plot_path, title, "ms",
        {{"RK3588 NPU (simulated)", {220, 90, 40}}, {"RK3588 CPU (A76 model)", {60, 110, 200}}},
        chart);
    if (!status.is_ok()) {
      std::fprintf(stderr, "npuflow plan: %s\n", status.to_string().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace npuflow::cli
