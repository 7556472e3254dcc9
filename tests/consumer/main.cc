// npuflow_consumer MODEL.onnx [--no-cpu-fallback] [KNOB=VALUE ...]: registers the installed npuflow
// EP with ONNX Runtime's C++ API, runs the model on it and on the CPU EP (optimizations off, the
// float reference) with the same seeded inputs, and prints npuflow's claim summary (its `info`
// log lines), the EP's version, and per output the max |difference| and cosine.
#include <onnxruntime_cxx_api.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "npuflow/npuflow.h"

namespace {

std::vector<std::string> g_npuflow_lines;

// npuflow's log lines reach the application through ONNX Runtime's logger.
void ORT_API_CALL collect_log(void*, OrtLoggingLevel, const char*, const char*, const char*,
                              const char* message) {
  if (std::strncmp(message, "npuflow [info] graph '", 22) == 0) g_npuflow_lines.push_back(message);
}

struct Inputs {
  std::vector<std::string> names;
  std::vector<std::vector<float>> data;
  std::vector<Ort::Value> values;
};

// Float inputs drawn from N(0, 1) with a fixed seed; symbolic dimensions become 1.
Inputs make_inputs(Ort::Session& session) {
  Inputs inputs;
  Ort::AllocatorWithDefaultOptions allocator;
  auto memory = Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  inputs.data.reserve(session.GetInputCount());
  for (size_t i = 0; i < session.GetInputCount(); ++i) {
    inputs.names.push_back(session.GetInputNameAllocated(i, allocator).get());
    Ort::TypeInfo type = session.GetInputTypeInfo(i);
    auto info = type.GetTensorTypeAndShapeInfo();
    if (info.GetElementType() != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT) {
      throw std::runtime_error("input '" + inputs.names.back() + "' is not float");
    }
    std::vector<int64_t> shape = info.GetShape();
    size_t count = 1;
    for (int64_t& d : shape) count *= static_cast<size_t>(d = d < 0 ? 1 : d);
    inputs.data.emplace_back(count);
    for (float& v : inputs.data.back()) v = normal(rng);
    inputs.values.push_back(Ort::Value::CreateTensor<float>(memory, inputs.data.back().data(),
                                                            count, shape.data(), shape.size()));
  }
  return inputs;
}

std::vector<Ort::Value> run(Ort::Session& session, Inputs& inputs,
                            std::vector<std::string>& output_names) {
  Ort::AllocatorWithDefaultOptions allocator;
  output_names.clear();
  for (size_t i = 0; i < session.GetOutputCount(); ++i) {
    output_names.push_back(session.GetOutputNameAllocated(i, allocator).get());
  }
  std::vector<const char*> in, out;
  for (const auto& n : inputs.names) in.push_back(n.c_str());
  for (const auto& n : output_names) out.push_back(n.c_str());
  return session.Run(Ort::RunOptions{nullptr}, in.data(), inputs.values.data(), in.size(),
                     out.data(), out.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.onnx [--no-cpu-fallback] [KNOB=VALUE ...]\n", argv[0]);
    return 2;
  }
  bool no_cpu_fallback = false;
  std::unordered_map<std::string, std::string> knobs{{"log", "info"}};
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t equals = arg.find('=');
    if (arg == "--no-cpu-fallback") {
      no_cpu_fallback = true;
    } else if (equals != std::string::npos && equals > 0) {
      knobs[arg.substr(0, equals)] = arg.substr(equals + 1);
    } else {
      std::fprintf(stderr, "unexpected argument '%s'\n", arg.c_str());
      return 2;
    }
  }
  try {
    Ort::Env env(ORT_LOGGING_LEVEL_WARNING, "consumer", collect_log, nullptr);
    env.RegisterExecutionProviderLibrary(NPUFLOW_EP_REGISTRATION_NAME, NPUFLOW_EP_LIBRARY_PATH);
    std::vector<Ort::ConstEpDevice> devices;
    for (Ort::ConstEpDevice device : env.GetEpDevices()) {
      if (std::strcmp(device.EpName(), NPUFLOW_EP_NAME) == 0) devices.push_back(device);
    }
    if (devices.empty()) throw std::runtime_error("ONNX Runtime lists no " NPUFLOW_EP_NAME);
    const char* version = devices[0].EpMetadata().GetValue("version");
    std::printf("npuflow EP %s (package %s) on ONNX Runtime %s\n", version ? version : "?",
                NPUFLOW_VERSION, Ort::GetVersionString().c_str());

    Ort::SessionOptions npuflow_options;
    if (no_cpu_fallback) npuflow_options.AddConfigEntry("session.disable_cpu_ep_fallback", "1");
    npuflow_options.AppendExecutionProvider_V2(env, devices, knobs);
    Ort::Session npuflow(env, argv[1], npuflow_options);
    for (const std::string& line : g_npuflow_lines) std::printf("claim: %s\n", line.c_str());

    Ort::SessionOptions cpu_options;
    cpu_options.SetGraphOptimizationLevel(ORT_DISABLE_ALL);
    Ort::Session cpu(env, argv[1], cpu_options);

    Inputs inputs = make_inputs(cpu);
    std::vector<std::string> names;
    std::vector<Ort::Value> expected = run(cpu, inputs, names);
    std::vector<Ort::Value> actual = run(npuflow, inputs, names);
    for (size_t o = 0; o < names.size(); ++o) {
      const size_t count = expected[o].GetTensorTypeAndShapeInfo().GetElementCount();
      const float* a = expected[o].GetTensorData<float>();
      const float* b = actual[o].GetTensorData<float>();
      double dot = 0, aa = 0, bb = 0, worst = 0;
      for (size_t i = 0; i < count; ++i) {
        dot += double(a[i]) * b[i];
        aa += double(a[i]) * a[i];
        bb += double(b[i]) * b[i];
        worst = std::fmax(worst, std::fabs(double(a[i]) - b[i]));
      }
      const double cosine = aa > 0 && bb > 0 ? dot / std::sqrt(aa * bb) : (aa == bb ? 1.0 : 0.0);
      std::printf("output '%s': %zu values, max |diff| %.9g, cosine %.9f\n", names[o].c_str(),
                  count, worst, cosine);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "npuflow_consumer: %s\n", e.what());
    return 1;
  }
  return 0;
}
