#include "cli/ort_session.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>

#include "core/fp16.h"
#include "core/knobs.h"
#include "core/strings.h"

namespace npuflow::cli {
namespace {

// The CLI's log sink: npuflow's own lines (the EP logs through ONNX Runtime's logger, each line
// starting "npuflow") and ONNX Runtime's errors, as plain lines; ONNX Runtime's warnings about its
// own placement (VerifyEachNodeIsAssignedToAnEp and the like) would only clutter what the
// commands print.
void log_to_stderr(void*, OrtLoggingLevel severity, const char*, const char*, const char*,
                   const char* message) {
  const bool own = std::strncmp(message, "npuflow", 7) == 0;
  if (own || severity >= ORT_LOGGING_LEVEL_ERROR) std::fprintf(stderr, "%s\n", message);
}

}  // namespace

OrtHarness::OrtHarness(const std::string& ep_library)
    : env_(ORT_LOGGING_LEVEL_WARNING, "npuflow", log_to_stderr, nullptr) {
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
  if (!config.profile_prefix.empty()) options.EnableProfiling(config.profile_prefix.c_str());
  return options;
}

// A report file holds one JSON document per non-empty line.
std::vector<std::string> non_empty_lines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
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

InputSet make_inputs(Ort::Session& session, int64_t dynamic_dim, uint32_t seed) {
  InputSet set;
  Ort::AllocatorWithDefaultOptions allocator;
  Ort::MemoryInfo memory = Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault);
  std::mt19937 rng(seed);
  for (size_t i = 0; i < session.GetInputCount(); ++i) {
    set.names.push_back(session.GetInputNameAllocated(i, allocator).get());
    const std::string& name = set.names.back();
    Ort::TypeInfo type_info = session.GetInputTypeInfo(i);  // must outlive `info`
    auto info = type_info.GetTensorTypeAndShapeInfo();
    std::vector<int64_t> shape = info.GetShape();
    const std::vector<const char*> symbols = info.GetSymbolicDimensions();
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] >= 0) continue;
      // One batch entry: `dynamic_dim` is the rows of one sequence or image.
      const bool batch = d < symbols.size() && symbols[d] != nullptr &&
                         std::string_view(symbols[d]).find("batch") != std::string_view::npos;
      shape[d] = batch ? 1 : dynamic_dim;
    }
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    const auto type = info.GetElementType();
    size_t element = 0;
    switch (type) {
      case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8:
      case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8:
      case ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL:
        element = 1;
        break;
      case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16:
        element = 2;
        break;
      case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT:
      case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32:
        element = 4;
        break;
      case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64:
        element = 8;
        break;
      default:
        throw std::runtime_error(str_cat("inputs of ONNX type ", static_cast<int>(type),
                                         " are not supported (input '", name,
                                         "'; float, float16, int8, uint8, int32, int64 and bool "
                                         "are)"));
    }
    set.storage.emplace_back(static_cast<size_t>(count) * element);
    uint8_t* data = set.storage.back().data();
    // Token ids small enough for any vocabulary the tests build; a mask of ones (every token live);
    // type ids zero.
    const bool mask = name.find("mask") != std::string::npos;
    const bool type_ids = name.find("type") != std::string::npos;
    std::uniform_int_distribution<int64_t> id(0, 63);
    auto token = [&] { return mask ? 1 : type_ids ? 0 : id(rng); };
    std::normal_distribution<float> normal(0.0f, 1.0f);
    if (type == ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL) {
      for (int64_t j = 0; j < count; ++j) data[j] = 1;
    } else if (element == 1) {
      std::uniform_int_distribution<int> byte(0, 255);
      for (int64_t j = 0; j < count; ++j) data[j] = static_cast<uint8_t>(byte(rng));
    } else if (type == ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64) {
      auto* ids = reinterpret_cast<int64_t*>(data);
      for (int64_t j = 0; j < count; ++j) ids[j] = token();
    } else if (type == ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32) {
      auto* ids = reinterpret_cast<int32_t*>(data);
      for (int64_t j = 0; j < count; ++j) ids[j] = static_cast<int32_t>(token());
    } else if (type == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16) {
      auto* halves = reinterpret_cast<uint16_t*>(data);
      for (int64_t j = 0; j < count; ++j) halves[j] = float_to_half_bits(normal(rng));
    } else {
      auto* floats = reinterpret_cast<float*>(data);
      for (int64_t j = 0; j < count; ++j) floats[j] = normal(rng);
    }
    set.values.push_back(Ort::Value::CreateTensor(memory, data, set.storage.back().size(),
                                                  shape.data(), shape.size(), type));
  }
  return set;
}

std::vector<Ort::Value> run(Ort::Session& session, InputSet& inputs,
                            const std::vector<std::string>& outputs) {
  std::vector<const char*> in_names, out_names;
  for (const auto& n : inputs.names) in_names.push_back(n.c_str());
  for (const auto& n : outputs) out_names.push_back(n.c_str());
  return session.Run(Ort::RunOptions{nullptr}, in_names.data(), inputs.values.data(),
                     in_names.size(), out_names.data(), out_names.size());
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

std::vector<std::string> output_names(Ort::Session& session) {
  std::vector<std::string> names;
  Ort::AllocatorWithDefaultOptions allocator;
  for (size_t i = 0; i < session.GetOutputCount(); ++i) {
    names.push_back(session.GetOutputNameAllocated(i, allocator).get());
  }
  return names;
}

int parse_model_command(const char* command, const char* usage,
                        const std::vector<std::string>& args, SessionConfig& config,
                        std::string& ep_library, const std::function<bool(size_t& i)>& own_flag) {
  for (size_t i = 0; i < args.size(); ++i) {
    const bool has_value = i + 1 < args.size();
    if (args[i] == "--opt" && has_value) {
      if (!parse_optimization_level(args[++i], config.optimization)) {
        std::fprintf(stderr, "npuflow %s: --opt takes disable|basic|extended|all\n", command);
        return 2;
      }
    } else if (args[i] == "--ep-library" && has_value) {
      ep_library = args[++i];
    } else if (args[i] == "--knob" && has_value) {
      const std::string& setting = args[++i];
      const size_t equals = setting.find('=');
      if (equals == 0 || equals == std::string::npos) {
        std::fprintf(stderr, "npuflow %s: --knob takes NAME=VALUE (npuflow knobs lists them)\n",
                     command);
        return 2;
      }
      const std::string name = setting.substr(0, equals);
      if (find_knob(name) == nullptr) {
        std::fprintf(stderr, "npuflow %s: --knob %s: no such knob (npuflow knobs lists them)\n",
                     command, name.c_str());
        return 2;
      }
      config.provider_options[name] = setting.substr(equals + 1);
    } else if (own_flag && own_flag(i)) {
      continue;
    } else if (config.model_path.empty() && args[i].rfind("--", 0) != 0) {
      config.model_path = args[i];
    } else {
      std::fprintf(stderr, "npuflow %s: unexpected argument '%s'\n", command, args[i].c_str());
      return 2;
    }
  }
  if (config.model_path.empty()) {
    std::fprintf(stderr, "usage: npuflow %s\n", usage);
    return 2;
  }
  if (!std::filesystem::exists(config.model_path)) {
    std::fprintf(stderr, "npuflow %s: no such model '%s'\n", command, config.model_path.c_str());
    return 1;
  }
  return -1;
}

std::vector<std::string> claim_report_lines(OrtHarness& harness, SessionConfig config,
                                            const std::string& stem) {
  const std::string report = temporary_path(stem);
  std::filesystem::remove(report);
  config.provider_options["report"] = report;
  { Ort::Session session = harness.npuflow_session(config); }
  std::vector<std::string> lines = non_empty_lines(report);
  std::filesystem::remove(report);
  return lines;
}

std::vector<JsonValue> claim_report(OrtHarness& harness, SessionConfig config,
                                    const std::string& stem) {
  return parse_report(claim_report_lines(harness, std::move(config), stem));
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
  return parse_report(non_empty_lines(path));
}

std::vector<JsonValue> parse_report(const std::vector<std::string>& lines) {
  std::vector<JsonValue> out;
  for (const std::string& line : lines) {
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
