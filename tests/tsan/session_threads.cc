// Concurrency check for the ThreadSanitizer build (`make test-tsan`): one ONNX Runtime session
// with the npuflow EP, run from several std::threads at once, every output compared with a
// single-threaded reference run.
//
//   npuflow_session_threads MODEL [--device host|sim] [--fail-every N] [--threads T] [--runs R]
//                           [--dim D] [--intra-op N]
//
// --dim: what symbolic input dimensions become (1 by default); --intra-op: ONNX Runtime's
// intra-op threads per session (its default: one per core).
//
// With --fail-every N (sim only) every Nth device submit fails and that call runs on the host, so
// results mix sim and host numerics: each output must then be within the sim gate (NMSE <= 5e-4)
// of the fault-free reference instead of identical to it. The EP must claim part of the model, or
// the run would check ONNX Runtime alone. Exit code 0 when every run matched.
#include <onnxruntime_cxx_api.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/json.h"

namespace {

constexpr const char* kEpName = "NpuflowExecutionProvider";
constexpr double kSimGateNmse = 5e-4;

struct Options {
  std::string model;
  std::string device = "host";
  int fail_every = 0;
  int threads = 4;
  int runs = 200;
  int64_t symbolic_dim = 1;  // what every symbolic input dimension becomes
  int intra_op_threads = 0;  // ONNX Runtime's default: one per core
};

// Random inputs for every model input, fixed seed.
struct Inputs {
  std::vector<std::string> names;
  std::vector<std::vector<uint8_t>> storage;
  std::vector<Ort::Value> values;
};

Inputs make_inputs(Ort::Session& session, int64_t symbolic_dim) {
  Inputs in;
  Ort::AllocatorWithDefaultOptions allocator;
  const Ort::MemoryInfo memory = Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault);
  std::mt19937 rng(11);
  for (size_t i = 0; i < session.GetInputCount(); ++i) {
    in.names.push_back(session.GetInputNameAllocated(i, allocator).get());
    const Ort::TypeInfo type = session.GetInputTypeInfo(i);
    const auto info = type.GetTensorTypeAndShapeInfo();
    std::vector<int64_t> shape = info.GetShape();
    int64_t count = 1;
    for (int64_t& d : shape) count *= (d = d < 0 ? symbolic_dim : d);
    const ONNXTensorElementDataType element = info.GetElementType();
    const bool is_float = element == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
    if (!is_float && element != ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8 &&
        element != ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8) {
      throw std::runtime_error("inputs must be float, int8 or uint8: " + in.names.back());
    }
    std::vector<uint8_t>& bytes = in.storage.emplace_back(count * (is_float ? 4 : 1));
    if (is_float) {
      std::normal_distribution<float> normal(0.0f, 1.0f);
      auto* f = reinterpret_cast<float*>(bytes.data());
      for (int64_t j = 0; j < count; ++j) f[j] = normal(rng);
    } else {
      std::uniform_int_distribution<int> byte(0, 255);
      for (uint8_t& b : bytes) b = static_cast<uint8_t>(byte(rng));
    }
    in.values.push_back(Ort::Value::CreateTensor(memory, bytes.data(), bytes.size(), shape.data(),
                                                 shape.size(), element));
  }
  return in;
}

struct Output {
  ONNXTensorElementDataType type;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

std::vector<Output> run_once(Ort::Session& session, const Inputs& in,
                             const std::vector<std::string>& output_names) {
  std::vector<const char*> inputs, outputs;
  for (const std::string& n : in.names) inputs.push_back(n.c_str());
  for (const std::string& n : output_names) outputs.push_back(n.c_str());
  std::vector<Ort::Value> values =
      session.Run(Ort::RunOptions{nullptr}, inputs.data(), in.values.data(), inputs.size(),
                  outputs.data(), outputs.size());
  std::vector<Output> result;
  for (Ort::Value& value : values) {
    const auto info = value.GetTensorTypeAndShapeInfo();
    Output out{info.GetElementType(), info.GetShape(), {}};
    const size_t elements = info.GetElementCount();
    size_t element_bytes = 0;
    switch (out.type) {
      case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT:
      case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32:
        element_bytes = 4;
        break;
      case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64:
        element_bytes = 8;
        break;
      case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8:
      case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8:
        element_bytes = 1;
        break;
      default:
        throw std::runtime_error("unexpected output element type");
    }
    const auto* data = static_cast<const uint8_t*>(value.GetTensorRawData());
    out.bytes.assign(data, data + elements * element_bytes);
    result.push_back(std::move(out));
  }
  return result;
}

// Normalized mean squared error of got against ref, over float outputs; integer outputs must be
// identical (their path is exact on both devices).
double nmse(const Output& ref, const Output& got) {
  if (ref.type != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT) return ref.bytes == got.bytes ? 0 : INFINITY;
  const auto* r = reinterpret_cast<const float*>(ref.bytes.data());
  const auto* g = reinterpret_cast<const float*>(got.bytes.data());
  double error = 0, power = 0;
  for (size_t i = 0; i < ref.bytes.size() / 4; ++i) {
    if (!std::isfinite(g[i])) return INFINITY;
    error += (double(r[i]) - g[i]) * (double(r[i]) - g[i]);
    power += double(r[i]) * r[i];
  }
  return error / std::max(power, 1e-30);
}

Ort::Session open_session(Ort::Env& env, const std::vector<Ort::ConstEpDevice>& devices,
                          const Options& options, int fail_every, const std::string& report) {
  Ort::SessionOptions session_options;
  if (options.intra_op_threads > 0) session_options.SetIntraOpNumThreads(options.intra_op_threads);
  std::unordered_map<std::string, std::string> provider = {
      {"device", options.device}, {"sim_fail_every", std::to_string(fail_every)}};
  if (!report.empty()) provider["report"] = report;
  session_options.AppendExecutionProvider_V2(env, devices, provider);
  return Ort::Session(env, options.model.c_str(), session_options);
}

size_t claims_in(const std::string& report) {
  size_t claims = 0;
  std::ifstream in(report);
  for (std::string line; std::getline(in, line);) {
    auto graph = npuflow::JsonValue::parse(line);
    if (!graph.is_ok()) throw std::runtime_error("bad report line: " + line);
    claims += graph.value()["claims"].array().size();
  }
  return claims;
}

int run(const Options& options) {
  Ort::Env env(ORT_LOGGING_LEVEL_ERROR, "session_threads");
  env.RegisterExecutionProviderLibrary("npuflow", NPUFLOW_EP_LIBRARY);
  std::vector<Ort::ConstEpDevice> devices;
  for (const Ort::ConstEpDevice& device : env.GetEpDevices()) {
    if (std::string(device.EpName()) == kEpName) devices.push_back(device);
  }
  if (devices.empty()) throw std::runtime_error("ONNX Runtime lists no npuflow device");

  const std::string report = (std::filesystem::temp_directory_path() /
                              ("npuflow-tsan-" + std::to_string(getpid()) + ".jsonl"))
                                 .string();
  std::filesystem::remove(report);
  Ort::Session reference_session = open_session(env, devices, options, 0, report);
  const size_t claims = claims_in(report);
  std::filesystem::remove(report);
  if (claims == 0) {
    std::fprintf(stderr, "%s: npuflow claims nothing, so nothing of npuflow would run\n",
                 options.model.c_str());
    return 1;
  }
  const Inputs inputs = make_inputs(reference_session, options.symbolic_dim);
  std::vector<std::string> output_names;
  Ort::AllocatorWithDefaultOptions allocator;
  for (size_t i = 0; i < reference_session.GetOutputCount(); ++i) {
    output_names.push_back(reference_session.GetOutputNameAllocated(i, allocator).get());
  }
  const std::vector<Output> reference = run_once(reference_session, inputs, output_names);

  // With faults on, a second session on the same model: the one the threads share.
  std::optional<Ort::Session> faulty;
  if (options.fail_every > 0) {
    faulty.emplace(open_session(env, devices, options, options.fail_every, ""));
  }
  Ort::Session& shared = faulty ? *faulty : reference_session;

  std::atomic<int> identical{0}, within_gate{0}, mismatched{0};
  std::atomic<double> worst_nmse{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < options.threads; ++t) {
    threads.emplace_back([&] {
      for (int r = 0; r < options.runs; ++r) {
        const std::vector<Output> got = run_once(shared, inputs, output_names);
        bool same = got.size() == reference.size(), close = same;
        for (size_t o = 0; same && o < got.size(); ++o) {
          if (got[o].shape != reference[o].shape || got[o].type != reference[o].type) {
            same = close = false;
            break;
          }
          if (got[o].bytes == reference[o].bytes) continue;
          same = false;
          const double e = nmse(reference[o], got[o]);
          for (double w = worst_nmse.load(); e > w && !worst_nmse.compare_exchange_weak(w, e);) {
          }
          close = close && options.fail_every > 0 && e <= kSimGateNmse;
        }
        (same ? identical : close ? within_gate : mismatched)++;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::printf(
      "%s device=%s sim_fail_every=%d: %zu claims, %d threads x %d runs: %d identical, %d within "
      "the sim gate (faults), %d mismatched; worst NMSE %.3g\n",
      std::filesystem::path(options.model).filename().c_str(), options.device.c_str(),
      options.fail_every, claims, options.threads, options.runs, identical.load(),
      within_gate.load(), mismatched.load(), worst_nmse.load());
  return mismatched.load() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--device" && has_value) {
      options.device = argv[++i];
    } else if (arg == "--fail-every" && has_value) {
      options.fail_every = std::atoi(argv[++i]);
    } else if (arg == "--threads" && has_value) {
      options.threads = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--runs" && has_value) {
      options.runs = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--intra-op" && has_value) {
      options.intra_op_threads = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--dim" && has_value) {
      options.symbolic_dim = std::max(1, std::atoi(argv[++i]));
    } else if (options.model.empty()) {
      options.model = arg;
    } else {
      std::fprintf(stderr, "unexpected argument '%s'\n", arg.c_str());
      return 2;
    }
  }
  if (options.model.empty()) {
    std::fprintf(stderr,
                 "usage: npuflow_session_threads MODEL [--device host|sim] [--fail-every N] "
                 "[--threads T] [--runs R] [--dim D] [--intra-op N]\n");
    return 2;
  }
  try {
    return run(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "npuflow_session_threads: %s\n", e.what());
    return 1;
  }
}
