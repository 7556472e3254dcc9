// npuflow: the command-line front end. `explain` and `demo` drive a real ONNX Runtime session
// with the npuflow EP loaded; `knobs` prints the knob table.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/ort_runtime.h"
#include "core/knobs.h"
#include "npuflow/version.h"
#include "sim/board_cpu_model.h"
#include "sim/cost_model.h"

namespace {

void print_usage() {
  std::printf(
      "usage: npuflow COMMAND [ARGS]\n"
      "  explain MODEL.onnx [--json] [--opt LEVEL]\n"
      "                                    groups the EP claims and why it refuses the rest\n"
      "  demo MODEL.onnx [--runs N] [--threads N] [--opt LEVEL]\n"
      "                                    CPU EP vs npuflow: claims, worst LSB, speed ratio\n"
      "  plan MODEL.onnx [--rows N] [--json] [--plot OUT.png] [--attention host|npu]\n"
      "       [--constant NAME=VALUE]       one inference priced on an RK3588 board, whole graph\n"
      "                                    and by phase, with npuflow and on the CPU EP alone\n"
      "  diffuse MODEL.safetensors [--steps N] [--cfg S] [--seed K] [--spectrum]\n"
      "       [--spectrum-option k=v,...] [--out LATENT.npy] [--trace DIR] [--json]\n"
      "                                    denoises a latent with a DiT (docs/diffusion.md)\n"
      "  plan --dit anima|MODEL.safetensors [--steps N] [--cfg S] [--spectrum] [--json]\n"
      "                                    a DiT denoise priced on an RK3588 board by phase\n"
      "  knobs [--markdown]                 every NPUFLOW_* knob with its default\n"
      "  constants                          the simulator's cost constants, tagged and sourced\n"
      "  version, --version                 npuflow and ONNX Runtime versions\n"
      "Every MODEL command also takes --knob NAME=VALUE (an npuflow knob, repeatable) and\n"
      "--ep-library PATH. ONNX Runtime is loaded at run time: NPUFLOW_ORT_LIBRARY, else\n"
      "libonnxruntime.so.1 beside the binary or on the library path.\n");
}

const char* kind_name(npuflow::KnobKind kind) {
  switch (kind) {
    case npuflow::KnobKind::kInt:
      return "integer";
    case npuflow::KnobKind::kBool:
      return "0|1";
    case npuflow::KnobKind::kChoice:
      return "choice";
    case npuflow::KnobKind::kLogLevel:
      return "level";
    case npuflow::KnobKind::kText:
      return "text";
  }
  return "?";
}

// NAME = VALUE UNIT [TAG] SOURCE, one per line: the NPU table, its derived rates, the board CPU's.
int constants_command() {
  std::fputs(npuflow::sim::CostModel::describe().c_str(), stdout);
  for (const npuflow::sim::CostConstant& c : npuflow::sim::board_cpu_constants()) {
    std::printf("%s = %g %s [%c] %s\n", c.name, npuflow::sim::board_cpu_constant(c.name), c.unit,
                c.tag, c.source);
  }
  return 0;
}

int knobs_command(const std::vector<std::string>& args) {
  const bool markdown = !args.empty() && args[0] == "--markdown";
  if (markdown) {
    std::printf("| Environment variable | Provider option | Values | Default | Meaning |\n");
    std::printf("|---|---|---|---|---|\n");
  }
  for (const npuflow::KnobSpec& knob : npuflow::knob_table()) {
    std::string values = *knob.choices ? knob.choices : kind_name(knob.kind);
    if (markdown) {
      for (size_t at = values.find('|'); at != std::string::npos; at = values.find('|', at + 2)) {
        values.replace(at, 1, "\\|");
      }
      const std::string default_cell =
          *knob.default_value ? std::string("`") + knob.default_value + "`" : "(empty)";
      std::printf("| `%s` | `%s` | %s | %s | %s |\n", knob.env, knob.name, values.c_str(),
                  default_cell.c_str(), knob.summary);
    } else {
      std::printf("%-20s %-10s default=%-8s %s\n", knob.env, knob.name,
                  *knob.default_value ? knob.default_value : "''", knob.summary);
    }
  }
  return 0;
}

// npuflow's version even where no ONNX Runtime can be loaded; the runtime's when it can.
int version_command() {
  std::string runtime;
  try {
    npuflow::cli::load_onnxruntime();
    runtime = "ONNX Runtime " + npuflow::cli::onnxruntime_version();
  } catch (const std::exception& e) {
    runtime = std::string("no ONNX Runtime: ") + e.what();
  }
  std::printf("npuflow %s (%s)\n", NPUFLOW_VERSION, runtime.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  try {
    if (command == "knobs") return knobs_command(args);
    if (command == "constants") return constants_command();
    if (command == "version" || command == "--version") return version_command();
    if (command == "diffuse") return npuflow::cli::diffuse_command(args);
    if (command == "plan" && std::find(args.begin(), args.end(), "--dit") != args.end())
      return npuflow::cli::plan_dit_command(args);
    if (command == "explain" || command == "demo" || command == "plan") {
      npuflow::cli::load_onnxruntime();
      if (command == "explain") return npuflow::cli::explain_command(args);
      if (command == "demo") return npuflow::cli::demo_command(args);
      return npuflow::cli::plan_command(args);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "npuflow %s: %s\n", command.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "npuflow: unknown command '%s'\n", command.c_str());
  print_usage();
  return 2;
}
