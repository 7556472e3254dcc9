// `npuflow plan model.onnx`: one inference of a model priced on an RK3588 board with npuflow and
// with ONNX Runtime's CPU EP alone, whole graph and by phase (cli/plan_pricing.h), beside this
// machine's measured CPU EP time. The claims come from a real session's report and the kernels
// from ONNX Runtime's profile of a run of that session, so the plan shows what the EP does.
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/ort_profile.h"
#include "cli/ort_session.h"
#include "cli/plan_pricing.h"
#include "cli/png_chart.h"
#include "core/knobs.h"
#include "core/strings.h"
#include "graph/claim_report.h"
#include "sim/cost_model.h"

namespace npuflow::cli {
namespace {

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

// The session's min_rows, resolved as the EP resolves it (provider options over environment).
int64_t resolved_min_rows(const SessionConfig& config) {
  auto knobs = Knobs::resolve([&](const KnobSpec& spec) -> std::optional<std::string> {
    auto it = config.provider_options.find(spec.name);
    if (it == config.provider_options.end()) return std::nullopt;
    return it->second;
  });
  return knobs.is_ok() ? knobs.value().integer("min_rows") : Knobs::defaults().integer("min_rows");
}

// The EP's report and a profiled run of the same session; then a profiled CPU-EP-only run.
struct ProfiledSessions {
  std::vector<JsonValue> graphs;
  std::vector<ProfiledNode> with_npuflow, cpu_only;
};

ProfiledSessions profile_sessions(OrtHarness& harness, SessionConfig config, int64_t rows) {
  ProfiledSessions out;
  const std::string report = temporary_path("plan");
  std::filesystem::remove(report);
  SessionConfig ep = config;
  ep.provider_options["report"] = report;
  ep.profile_prefix = temporary_path("plan-npuflow-profile");
  {
    Ort::Session session = harness.npuflow_session(ep);
    InputSet inputs = make_inputs(session, rows, 7);
    auto nodes = profiled_run(session, inputs);
    if (!nodes.is_ok()) throw std::runtime_error(nodes.status().to_string());
    out.with_npuflow = std::move(nodes).value();
  }
  out.graphs = read_report(report);
  std::filesystem::remove(report);
  config.profile_prefix = temporary_path("plan-cpu-profile");
  Ort::Session cpu = harness.cpu_session(config);
  InputSet inputs = make_inputs(cpu, rows, 7);
  auto nodes = profiled_run(cpu, inputs);
  if (!nodes.is_ok()) throw std::runtime_error(nodes.status().to_string());
  out.cpu_only = std::move(nodes).value();
  return out;
}

// JSON numbers with the precision that lets a reader add the phases up to the totals.
std::string num(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.10g", value);
  return text;
}

std::string phases_json(const PhaseSplit& split) {
  std::string out;
  for (int p = 0; p < kPhaseCount; ++p) {
    out += str_cat(p ? "," : "", "\"", phase_name(static_cast<Phase>(p)), "\":", num(split.ms[p]));
  }
  return str_cat("{", out, "}");
}

void print_json(const SessionConfig& config, const PlanOptions& options, const BoardPlan& plan,
                int64_t min_rows, double cpu_ep_ms) {
  std::string items;
  for (const PricedClaim& g : plan.claimed) {
    items += str_cat(
        items.empty() ? "" : ",", "{\"subgraph\":\"", json_escape(g.subgraph), "\",\"kind\":\"",
        json_escape(g.kind), "\",\"type\":\"", sim::npu_type_name(g.type), "\",\"gemms\":", g.gemms,
        ",\"host_gemms\":", g.host_gemms, ",\"m\":", g.m, ",\"k\":", g.k, ",\"n\":", g.n,
        ",\"npu_ms\":", num(g.npu_ms), ",\"board_ms\":", num(g.board.total()),
        ",\"cpu_ms\":", num(g.cpu_ep.total()), ",\"phases_ms\":", phases_json(g.board),
        ",\"resident_bytes\":", g.resident_bytes, "}");
  }
  const double with = plan.with_npuflow.total(), baseline = plan.baseline.total();
  std::printf(
      "%s\n",
      str_cat(
          "{\"model\":\"", json_escape(config.model_path), "\",\"rows\":", options.rows,
          ",\"workers\":", options.workers, ",\"min_rows\":", min_rows,
          ",\"whole_graph\":", plan.whole_graph ? "true" : "false", ",\"claimed\":[", items,
          "],\"claims\":", plan.claims, ",\"npuflow_kernels\":", plan.npuflow_kernels,
          ",\"cpu_ep_kernels_with_npuflow\":", plan.cpu_kernels_with_npuflow,
          ",\"cpu_ep_kernels_baseline\":", plan.cpu_kernels_baseline, ",\"device_macs\":",
          plan.device_macs, ",\"host_macs\":", plan.host_macs, ",\"npu_ms\":", num(plan.npu_ms),
          ",\"host_cpu_ms\":", num(with - plan.npu_ms), ",\"board_with_npu_ms\":", num(with),
          ",\"board_cpu_only_ms\":", num(baseline), ",\"projected_speedup\":", num(plan.speedup()),
          ",\"phases_ms\":{\"with_npuflow\":", phases_json(plan.with_npuflow),
          ",\"cpu_ep_baseline\":", phases_json(plan.baseline), "},\"baseline\":\"",
          json_escape(baseline_definition()), "\",\"resident_bytes\":", plan.resident_bytes,
          ",\"iova_per_fd_mib\":",
          static_cast<double>(plan.resident_bytes) / options.workers / (1024.0 * 1024.0),
          ",\"iova_budget_mib\":", static_cast<double>(sim::kIovaBytesPerFd) / (1024.0 * 1024.0),
          ",\"this_machine_cpu_ep_ms\":", num(cpu_ep_ms), "}")
          .c_str());
}

void print_text(const SessionConfig& config, const PlanOptions& options, const BoardPlan& plan,
                int64_t min_rows, double cpu_ep_ms) {
  std::printf(
      "npuflow plan: %s (rows=%lld for symbolic dimensions; RK3588 NPU at 600 MHz, %d worker "
      "fds, simulated; min_rows=%lld)\n",
      config.model_path.c_str(), static_cast<long long>(options.rows), options.workers,
      static_cast<long long>(min_rows));
  std::printf("  %-24s %-5s %5s %4s %6s %6s %6s %10s %12s %9s %9s %9s %8s\n", "subgraph", "type",
              "GEMMs", "host", "M", "K", "N", "MMACs", "resident KiB", "NPU ms", "board ms",
              "CPU EP ms", "speedup");
  for (const PricedClaim& g : plan.claimed) {
    auto dim = [&](int64_t v) { return g.gemms == 1 ? std::to_string(v) : std::string("-"); };
    const double board = g.board.total();
    std::printf("  %-24s %-5s %5d %4d %6s %6s %6s %10.1f %12lld %9.3f %9.3f %9.3f %7.2fx\n",
                g.subgraph.substr(0, 24).c_str(), sim::npu_type_name(g.type), g.gemms, g.host_gemms,
                dim(g.m).c_str(), dim(g.k).c_str(), dim(g.n).c_str(), g.macs / 1e6,
                static_cast<long long>(g.resident_bytes / 1024), g.npu_ms, board, g.cpu_ep.total(),
                board > 0 ? g.cpu_ep.total() / board : 0.0);
  }
  if (plan.whole_graph) {
    std::printf(
        "  whole graph, from ONNX Runtime's profiles: %d npuflow kernels for %d claims and %d CPU "
        "EP kernels beside them; %d kernels on the CPU EP alone\n",
        plan.npuflow_kernels, plan.claims, plan.cpu_kernels_with_npuflow,
        plan.cpu_kernels_baseline);
  } else {
    std::printf("  left on the CPU: %zu GEMMs, %.1f MMACs (no profile: GEMMs only)\n",
                plan.host_gemms.size(), plan.host_macs / 1e6);
  }
  std::printf("  %-20s %14s %14s\n", "phase (board ms)", "with npuflow", "CPU EP alone");
  for (int p = 0; p < kPhaseCount; ++p) {
    std::printf("  %-20s %14.3f %14.3f\n", phase_name(static_cast<Phase>(p)),
                plan.with_npuflow.ms[p], plan.baseline.ms[p]);
  }
  std::printf(
      "  RK3588 projected: %.3f ms with npuflow (NPU %.3f) vs %.3f ms on the CPU EP alone: "
      "%.2fx\n",
      plan.with_npuflow.total(), plan.npu_ms, plan.baseline.total(), plan.speedup());
  std::printf("  resident weights %.2f MiB (%.2f MiB per fd of a %.0f MiB IOVA window)\n",
              plan.resident_bytes / (1024.0 * 1024.0),
              static_cast<double>(plan.resident_bytes) / options.workers / (1024.0 * 1024.0),
              static_cast<double>(sim::kIovaBytesPerFd) / (1024.0 * 1024.0));
  std::printf("  baseline: %s\n", baseline_definition().c_str());
  if (options.runs > 0) {
    std::printf(
        "  this machine, CPU EP: %.3f ms per run (median of %d; for reference, not a board "
        "figure)\n",
        cpu_ep_ms, options.runs);
  }
}

int plot(const SessionConfig& config, const PlanOptions& options, const BoardPlan& plan) {
  std::vector<ChartRow> chart;
  for (int p = 0; p < kPhaseCount; ++p) {
    if (plan.with_npuflow.ms[p] == 0 && plan.baseline.ms[p] == 0) continue;
    chart.push_back(
        {phase_name(static_cast<Phase>(p)), {plan.with_npuflow.ms[p], plan.baseline.ms[p]}});
  }
  char projected[32];
  std::snprintf(projected, sizeof(projected), "%.2fx", plan.speedup());
  const std::string title =
      str_cat("npuflow plan: ", std::filesystem::path(config.model_path).filename().string(),
              ": RK3588 projected ", projected);
  Status status = write_bar_chart_png(
      options.plot_path, title, "ms",
      {{"RK3588 with npuflow (simulated)", {220, 90, 40}}, {"RK3588 CPU EP", {60, 110, 200}}},
      chart);
  if (!status.is_ok()) {
    std::fprintf(stderr, "npuflow plan: %s\n", status.to_string().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int plan_command(const std::vector<std::string>& args) {
  SessionConfig config;
  std::string ep_library = default_ep_library();
  PlanOptions options;
  bool bad_constant = false;
  const int usage = parse_model_command(
      "plan",
      "plan MODEL.onnx [--rows N] [--workers N] [--runs N] [--json] [--plot OUT.png] [--opt LEVEL] "
      "[--attention host|npu] [--constant NAME=VALUE]",
      args, config, ep_library, [&](size_t& i) {
        const bool has_value = i + 1 < args.size();
        if (args[i] == "--json") {
          options.json = true;
        } else if (args[i] == "--plot" && has_value) {
          options.plot_path = args[++i];
        } else if (args[i] == "--rows" && has_value) {
          options.rows = std::clamp<int64_t>(std::atoll(args[++i].c_str()), 1, kMaxGemmDim);
        } else if (args[i] == "--workers" && has_value) {
          options.workers = std::clamp(std::atoi(args[++i].c_str()), 1, 8);
        } else if (args[i] == "--runs" && has_value) {
          options.runs = std::max(0, std::atoi(args[++i].c_str()));
        } else if (args[i] == "--attention" && has_value &&
                   (args[i + 1] == "npu" || args[i + 1] == "host")) {
          options.attention_on_npu = args[++i] == "npu";
        } else if (args[i] == "--constant" && has_value) {
          const std::string setting = args[++i];
          const size_t equals = setting.find('=');
          char* end = nullptr;
          const double value =
              equals == std::string::npos ? 0 : std::strtod(setting.c_str() + equals + 1, &end);
          if (equals == std::string::npos || end == nullptr || *end != '\0' || !(value > 0) ||
              !sim::override_constant(setting.substr(0, equals), value)) {
            std::fprintf(stderr,
                         "npuflow plan: --constant %s: want NAME=VALUE (VALUE > 0) with NAME a "
                         "constant of docs/simulator.md's tables\n",
                         setting.c_str());
            bad_constant = true;
          }
        } else {
          return false;
        }
        return true;
      });
  if (usage >= 0) return usage;
  if (bad_constant) return 2;
  // The plan is for the board: the session claims as it would there, on the simulator, unless
  // the device is chosen explicitly.
  if (!config.provider_options.count("device") && std::getenv("NPUFLOW_DEVICE") == nullptr) {
    config.provider_options["device"] = "sim";
  }
  OrtHarness harness(ep_library);
  const ProfiledSessions sessions = profile_sessions(harness, config, options.rows);
  return plan_report(&harness, config, options, sessions.graphs, &sessions.cpu_only,
                     &sessions.with_npuflow);
}

int plan_report(OrtHarness* harness, const SessionConfig& config, const PlanOptions& options,
                const std::vector<JsonValue>& graphs, const std::vector<ProfiledNode>* cpu_only,
                const std::vector<ProfiledNode>* with_npuflow) {
  PlanInputs inputs;
  inputs.rows = options.rows;
  inputs.workers = options.workers;
  inputs.min_rows = resolved_min_rows(config);
  inputs.attention_on_npu = options.attention_on_npu;
  BoardPlan plan = price_report(graphs, inputs, with_npuflow);
  if (cpu_only != nullptr && with_npuflow != nullptr) {
    price_profiles(plan, *cpu_only, *with_npuflow, transpose_weights(graphs));
  }
  const double cpu_ep_ms = options.runs > 0 && harness != nullptr
                               ? measure_cpu_ep_ms(*harness, config, options.rows, options.runs)
                               : 0.0;
  if (options.json) {
    print_json(config, options, plan, inputs.min_rows, cpu_ep_ms);
  } else {
    print_text(config, options, plan, inputs.min_rows, cpu_ep_ms);
  }
  return options.plot_path.empty() ? 0 : plot(config, options, plan);
}

}  // namespace npuflow::cli
