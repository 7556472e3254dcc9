#include "cli/ort_session.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "core/strings.h"

namespace npuflow::cli {

OrtHarness::OrtHarness(const std::string& ep_library) : env_(ORT_LOGGING_LEVEL_WARNING, "npuflow") {
  if (!std::filesystem::exists(ep_library)) {
    throw std::runtime_error(str_cat("the npuflow EP library '", ep_library,
                                     "' does not exist (run `make build`, or pass --ep-library)"));
  }
  env_.RegisterExecutionProviderLibrary("npuflow", ep_library);
  for (const Ort::ConstEpDevice& device : env_.GetEpDevices()) {
    if (std::string(device.EpName()) == "NpuflowExecutionProvider") {
      npuflow_devices_.push_back(device);
    }
  }
  if (npuflow_devices_.empty()) throw std::runtime_error("ONNX Runtime lists no npuflow device");
}

namespace {
Ort::SessionOptions base_options(const SessionConfig& config) {
  Ort::SessionOptions options;
  options.SetGraphOptimizationLevel(config.optimization);
  if (config.intra_op_threads > 0) options.SetIntraOpNumThreads(config.intra_op_threads);
  return options;
}
}  // namespace

Ort::Session OrtHarness::cpu_session(const SessionConfig& config) {
  return Ort::Session(env_, config.model_path.c_str(), base_options(config));
}

Ort::Session OrtHarness::npuflow_session(const SessionConfig& config) {
  Ort::SessionOptions options = base_options(config);
  std::unordered_map<std::string, std::string> provider(config.provider_options.begin(),
                                                        config.provider_options.end());
  options.AppendExecutionProvider_V2(env_, npuflow_devices_, provider);
  return Ort::Session(env_, config.model_path.c_str(), options);
}

std::string default_ep_library() {
  std::error_code error;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return "build/lib/libonnxruntime_npuflow.so";
  return (exe.parent_path().parent_path() / "lib" / "libonnxruntime_npuflow.so").string();
}

bool parse_optimization_level(const std::string& text, GraphOptimizationLevel& out) {
  if (text == "disable")
    out = ORT_DISABLE_ALL;
  else if (text == "basic")
    out = ORT_ENABLE_BASIC;
  else if (text == "extended")
    out = ORT_ENABLE_EXTENDED;
  else if (text == "all")
    out = ORT_ENABLE_ALL;
  else
    return false;
  return true;
}

const char* optimization_level_name(GraphOptimizationLevel level) {
  switch (level) {
    case ORT_DISABLE_ALL:
      return "disable";
    case ORT_ENABLE_BASIC:
      return "basic";
    case ORT_ENABLE_EXTENDED:
      return "extended";
    default:
      return "all";
  }
}

std::vector<JsonValue> read_report(const std::string& path) {
  std::vector<JsonValue> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto parsed = JsonValue::parse(line);
    if (!parsed.is_ok()) throw std::runtime_error(parsed.status().to_string());
    out.push_back(std::move(parsed).value());
  }
  return out;
}

std::string temporary_path(const std::string& stem) {
  const char* dir = std::getenv("TMPDIR");
  return str_cat(dir ? dir : "/tmp", "/npuflow-", stem, "-", getpid(), ".jsonl");
}

}  // namespace npuflow::cli
