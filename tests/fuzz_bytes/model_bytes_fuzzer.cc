// libFuzzer target: what `npuflow explain` and `npuflow plan` do with a model file's bytes. ONNX
// Runtime parses the protobuf and builds the graph (its code, not instrumented here); npuflow owns
// everything after: the EP's graph snapshot (OrtGraph -> GraphView), the QDQ and encoder matchers,
// compiling the claims on the host and sim devices (weight packing), the claim report it writes,
// and what both commands print and price from that report.
//
// One ONNX Runtime environment with the instrumented EP (NPUFLOW_FUZZ_EP_LIBRARY) serves every
// input. Two bits of the input length pick the optimization level and the device, so the corpus
// covers both matchers' views of each graph on both devices.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/ort_session.h"
#include "core/strings.h"

namespace {

npuflow::cli::OrtHarness& harness() {
  static npuflow::cli::OrtHarness* instance = [] {
    std::fflush(stdout);
    const int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) ::dup2(devnull, STDOUT_FILENO);
    return new npuflow::cli::OrtHarness(NPUFLOW_FUZZ_EP_LIBRARY);
  }();
  return *instance;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  npuflow::cli::OrtHarness& ort = harness();
  static const std::string path = npuflow::cli::temporary_path("fuzz-model");
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  npuflow::cli::SessionConfig config;
  config.model_path = path;
  config.intra_op_threads = 1;
  config.optimization = size & 1 ? ORT_DISABLE_ALL : ORT_ENABLE_ALL;
  config.provider_options["device"] = size & 2 ? "sim" : "host";
  config.provider_options["log"] = "error";
  std::vector<npuflow::JsonValue> graphs;
  try {
    graphs = npuflow::cli::claim_report(ort, config, "fuzz-report");
  } catch (const std::exception&) {
    return 0;  // a clean refusal of the model, by ONNX Runtime or by npuflow
  }
  npuflow::cli::explain_report(config, graphs);
  npuflow::cli::PlanOptions plan;
  plan.runs = 0;
  npuflow::cli::plan_report(nullptr, config, plan, graphs);
  return 0;
}
