// `npuflow explain model.onnx`: what the EP claims in a model and why it refuses the rest, read
// from the EP's own report while a real session is created.
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/ort_session.h"
#include "core/strings.h"

namespace npuflow::cli {
namespace {

void print_encoders(const JsonValue& graph) {
  const auto& claims = graph["claims"].array();
  std::printf("graph '%s': %zu of %d vision encoders claimed\n", graph["graph"].string().c_str(),
              claims.size(), static_cast<int>(graph["candidates"].integer()));
  if (claims.empty()) return;
  std::printf("  %-28s %-15s %6s %6s %5s %5s %5s %s\n", "node", "family", "layers", "hidden",
              "heads", "exits", "nodes", "note");
  for (const JsonValue& claim : claims) {
    std::printf("  %-28s %-15s %6d %6d %5d %5zu %5zu %s\n", claim["node"].string().c_str(),
                claim["family"].string().c_str(), static_cast<int>(claim["layers"].integer()),
                static_cast<int>(claim["hidden"].integer()),
                static_cast<int>(claim["heads"].integer()), claim["exits"].array().size(),
                claim["nodes"].array().size(), claim["note"].string().c_str());
    if (const int registers = static_cast<int>(claim["registers"].integer()); registers > 0) {
      std::printf("  %-28s registers: %d after token %d\n", "", registers,
                  static_cast<int>(claim["register_position"].integer()));
    }
    // A windowed encoder: which blocks attend over how many of the stream's sequences at once.
    std::vector<std::string> global;
    int64_t group = 1;
    const auto& groups = claim["attention_groups"].array();
    for (size_t i = 0; i < groups.size(); ++i) {
      if (groups[i].integer() <= 1) continue;
      global.push_back(str_cat(i));
      group = groups[i].integer();
    }
    if (!global.empty()) {
      std::printf("  %-28s global blocks %s attend over %d windows each; the others per window\n",
                  "", join(global, ", ").c_str(), static_cast<int>(group));
    }
    // SAM's grid: which blocks attend in windows of the padded grid and which over all of it.
    if (const auto& windows = claim["grid_windows"].array(); !windows.empty()) {
      const auto& grid = claim["grid"].array();
      std::vector<std::string> windowed, whole;
      int64_t window = 0;
      for (size_t i = 0; i < windows.size(); ++i) {
        (windows[i].integer() > 0 ? windowed : whole).push_back(str_cat(i));
        if (windows[i].integer() > 0) window = windows[i].integer();
      }
      std::printf(
          "  %-28s %dx%d token grid: blocks %s attend in %dx%d windows, blocks %s over the "
          "whole grid; relative positions in %d blocks\n",
          "", static_cast<int>(grid[0].integer()), static_cast<int>(grid[1].integer()),
          windowed.empty() ? "none" : join(windowed, ", ").c_str(), static_cast<int>(window),
          static_cast<int>(window), whole.empty() ? "none" : join(whole, ", ").c_str(),
          static_cast<int>(claim["rel_pos_layers"].integer()));
    }
  }
}

// Conv and ConvTranspose claims, a row per node (ConvTranspose's output padding beside its pads).
void print_convolutions(const JsonValue& graph) {
  const bool transposed = graph["matcher"].string() == "conv_transpose";
  const auto& claims = graph["claims"].array();
  std::printf("graph '%s': %zu of %d %s nodes claimed\n", graph["graph"].string().c_str(),
              claims.size(), static_cast<int>(graph["candidates"].integer()),
              transposed ? "ConvTranspose" : "Conv");
  if (claims.empty()) return;
  std::printf("  %-28s %6s %6s %-7s %-7s %-9s %-7s %s\n", "node", "IC", "OC", "kernel", "stride",
              "pads", transposed ? "outpad" : "", "dilation");
  auto pair = [](const JsonValue& v) {
    return str_cat(v.array()[0].integer(), "x", v.array()[1].integer());
  };
  for (const JsonValue& claim : claims) {
    const auto& pads = claim["pads"].array();
    std::printf("  %-28s %6d %6d %-7s %-7s %-9s %-7s %s\n", claim["node"].string().c_str(),
                static_cast<int>(claim["ic"].integer()), static_cast<int>(claim["oc"].integer()),
                pair(claim["kernel"]).c_str(), pair(claim["strides"]).c_str(),
                str_cat(pads[0].integer(), ",", pads[1].integer(), ",", pads[2].integer(), ",",
                        pads[3].integer())
                    .c_str(),
                transposed ? pair(claim["output_padding"]).c_str() : "",
                pair(claim["dilations"]).c_str());
  }
}

void print_graph(const JsonValue& graph) {
  const auto& claims = graph["claims"].array();
  const auto& refusals = graph["refusals"].array();
  const bool convolutions =
      graph["matcher"].string() == "conv_transpose" || graph["matcher"].string() == "conv";
  const bool own_table = graph["matcher"].string() == "vision" || convolutions;
  if (graph["matcher"].string() == "vision") {
    print_encoders(graph);
  } else if (convolutions) {
    print_convolutions(graph);
  } else {
    const std::string& matcher = graph["matcher"].string();
    std::printf("graph '%s': %zu of %d %s claimed\n", graph["graph"].string().c_str(),
                claims.size(), static_cast<int>(graph["candidates"].integer()),
                matcher == "integer"      ? "integer MatMul groups (MatMulInteger, QLinearMatMul)"
                : matcher == "float_int8" ? "float MatMuls as int8 (NPUFLOW_FLOAT_MATMUL=int8)"
                                          : "QDQ MatMul groups");
  }
  if (!claims.empty() && !own_table) {
    std::printf("  %-28s %6s %6s %-7s %-10s %-10s %-7s %s\n", "node", "K", "N", "weight",
                "w scales", "activation", "output", "nodes");
    for (const JsonValue& claim : claims) {
      const int scales = static_cast<int>(claim["weight_scales"].integer());
      std::printf("  %-28s %6d %6d %-7s %-10s %-10s %-7s %zu%s%s\n", claim["node"].string().c_str(),
                  static_cast<int>(claim["k"].integer()), static_cast<int>(claim["n"].integer()),
                  claim["weight"].string().c_str(), scales == 1 ? "tensor" : "column",
                  claim["activation"].string().c_str(), claim["output"].string().c_str(),
                  claim["nodes"].array().size(),
                  claim["activation_dequantized"].boolean() ? " (shared input DQ kept on CPU)" : "",
                  claim["note"].string().c_str());
    }
  }
  if (!refusals.empty()) {
    std::map<std::string, std::pair<int, const JsonValue*>> by_reason;
    for (const JsonValue& refusal : refusals) {
      auto& entry = by_reason[refusal["reason"].string()];
      if (entry.first++ == 0) entry.second = &refusal;
    }
    std::printf("  refused (these run on the CPU EP unchanged):\n");
    std::printf("  %-26s %5s  %s\n", "reason", "count", "example");
    for (const auto& [reason, entry] : by_reason) {
      std::printf("  %-26s %5d  '%s': %s\n", reason.c_str(), entry.first,
                  (*entry.second)["node"].string().c_str(),
                  (*entry.second)["detail"].string().c_str());
    }
    // Claims declined by the do-no-harm policy (claim=faster), each with both costs.
    bool header = false;
    for (const JsonValue& refusal : refusals) {
      const std::string& reason = refusal["reason"].string();
      if (reason != "slower_than_cpu_ep" && reason != "no_measured_cost") continue;
      if (!header) std::printf("  declined by claim=faster (they run on the CPU EP):\n");
      header = true;
      std::printf("  '%s': %s\n", refusal["node"].string().c_str(),
                  refusal["detail"].string().c_str());
    }
  }
}

}  // namespace

int explain_command(const std::vector<std::string>& args) {
  SessionConfig config;
  std::string ep_library = default_ep_library();
  bool json = false;
  const int usage = parse_model_command(
      "explain", "explain MODEL.onnx [--json] [--opt disable|basic|extended|all] [--knob K=V]",
      args, config, ep_library, [&](size_t& i) {
        if (args[i] != "--json") return false;
        json = true;
        return true;
      });
  if (usage >= 0) return usage;
  OrtHarness harness(ep_library);
  if (!json) return explain_report(config, claim_report(harness, config, "explain"));
  // The EP's own records, one per graph it was offered, as a JSON array (what the Python
  // package's npuflow.explain() returns); each is checked to parse first.
  const std::vector<std::string> lines = claim_report_lines(harness, config, "explain");
  parse_report(lines);
  std::printf("[%s]\n", join(lines, ",\n").c_str());
  return 0;
}

int explain_report(const SessionConfig& config, const std::vector<JsonValue>& graphs) {
  std::printf("npuflow explain: %s (ONNX Runtime optimization level: %s)\n",
              config.model_path.c_str(), optimization_level_name(config.optimization));
  for (const JsonValue& graph : graphs) print_graph(graph);
  if (graphs.empty()) std::printf("ONNX Runtime offered npuflow no graph\n");
  return 0;
}

}  // namespace npuflow::cli
