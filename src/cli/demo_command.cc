// `npuflow demo model.onnx`: runs a model on the CPU EP and on npuflow with the same random
// inputs and prints the groups claimed, the worst difference in LSB and the speed ratio.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <random>

#include "cli/commands.h"
#include "cli/ort_session.h"
#include "core/strings.h"

namespace npuflow::cli {
namespace {

// The grid step of a tensor holding at most 256 distinct values (a dequantized int8 tensor),
// or nothing if it holds more.
std::optional<double> quantization_step(const float* values, size_t count) {
  std::vector<float> distinct;
  for (size_t i = 0; i < count; ++i) {
    if (std::find(distinct.begin(), distinct.end(), values[i]) == distinct.end()) {
      distinct.push_back(values[i]);
      if (distinct.size() > 256) return std::nullopt;
    }
  }
  // A few values each seen once are no evidence of a grid.
  if (distinct.size() < 2 || count < 4 * distinct.size()) return std::nullopt;
  std::sort(distinct.begin(), distinct.end());
  double step = distinct[1] - distinct[0];
  for (size_t i = 2; i < distinct.size(); ++i)
    step = std::min<double>(step, distinct[i] - distinct[i - 1]);
  return step;
}

// How far one run's outputs are from another's: worst LSB over the int8 outputs (direct, or
// dequantized to a grid of at most 256 values), and per float output its cosine when `print`.
struct Difference {
  int64_t worst_lsb = 0, differing = 0, integer_values = 0;
};

Difference compare_outputs(const std::vector<Ort::Value>& expected,
                           const std::vector<Ort::Value>& actual,
                           const std::vector<std::string>& outputs, bool print) {
  Difference d;
  for (size_t o = 0; o < outputs.size(); ++o) {
    auto info = expected[o].GetTensorTypeAndShapeInfo();
    const size_t count = info.GetElementCount();
    const auto type = info.GetElementType();
    if (type == ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8 || type == ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8) {
      const bool is_signed = type == ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8;
      const auto* a = expected[o].GetTensorData<uint8_t>();
      const auto* b = actual[o].GetTensorData<uint8_t>();
      for (size_t i = 0; i < count; ++i) {
        const int va = is_signed ? static_cast<int8_t>(a[i]) : a[i];
        const int vb = is_signed ? static_cast<int8_t>(b[i]) : b[i];
        d.worst_lsb = std::max<int64_t>(d.worst_lsb, std::abs(va - vb));
        d.differing += va != vb;
      }
      d.integer_values += static_cast<int64_t>(count);
    } else if (type == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT) {
      const float* a = expected[o].GetTensorData<float>();
      const float* b = actual[o].GetTensorData<float>();
      double dot = 0, na = 0, nb = 0, worst = 0;
      for (size_t i = 0; i < count; ++i) {
        dot += double(a[i]) * b[i];
        na += double(a[i]) * a[i];
        nb += double(b[i]) * b[i];
        worst = std::max(worst, std::abs(double(a[i]) - b[i]));
      }
      if (print)
        std::printf("  output '%s' (float): max |diff| %.3g, cosine %.9f", outputs[o].c_str(),
                    worst, dot / std::sqrt(std::max(na * nb, 1e-300)));
      // A dequantized int8 output takes at most 256 values on a grid: its step is one LSB.
      if (auto step = quantization_step(a, count)) {
        const auto lsb = static_cast<int64_t>(std::llround(worst / *step));
        int64_t off = 0;
        for (size_t i = 0; i < count; ++i) off += a[i] != b[i];
        if (print)
          std::printf(", %lld LSB (%lld of %zu values differ)", static_cast<long long>(lsb),
                      static_cast<long long>(off), count);
        d.worst_lsb = std::max(d.worst_lsb, lsb);
        d.differing += off;
        d.integer_values += static_cast<int64_t>(count);
      }
      if (print) std::printf("\n");
    }
  }
  return d;
}

}  // namespace

int demo_command(const std::vector<std::string>& args) {
  SessionConfig config;
  std::string ep_library = default_ep_library();
  int runs = 20;
  int64_t dynamic_dim = 1;
  const int usage = parse_model_command(
      "demo", "demo MODEL.onnx [--runs N] [--threads N] [--opt LEVEL] [--dynamic-dim N]", args,
      config, ep_library, [&](size_t& i) {
        const bool has_value = i + 1 < args.size();
        if (args[i] == "--runs" && has_value) {
          runs = std::max(1, std::atoi(args[++i].c_str()));
        } else if (args[i] == "--threads" && has_value) {
          config.intra_op_threads = std::atoi(args[++i].c_str());
        } else if (args[i] == "--dynamic-dim" && has_value) {
          dynamic_dim = std::max<int64_t>(1, std::atoll(args[++i].c_str()));
        } else {
          return false;
        }
        return true;
      });
  if (usage >= 0) return usage;
  const std::string report = temporary_path("demo");
  std::filesystem::remove(report);
  config.provider_options["report"] = report;
  if (config.intra_op_threads > 0) {
    config.provider_options["threads"] = std::to_string(config.intra_op_threads);
  }

  OrtHarness harness(ep_library);
  Ort::Session cpu = harness.cpu_session(config);
  Ort::Session npu = harness.npuflow_session(config);
  std::map<std::string, std::pair<int, int>> by_matcher;  // claimed, candidates
  for (const JsonValue& graph : read_report(report)) {
    const std::string matcher = graph["matcher"].string();
    auto& [claimed, candidates] = by_matcher[matcher == "vision"       ? "vision encoders"
                                             : matcher == "float_int8" ? "float MatMuls as int8"
                                                                       : "QDQ MatMul groups"];
    claimed += static_cast<int>(graph["claims"].array().size());
    candidates += static_cast<int>(graph["candidates"].integer());
  }
  std::filesystem::remove(report);

  InputSet inputs = make_inputs(cpu, dynamic_dim, 1234);
  const std::vector<std::string> outputs = output_names(cpu);
  auto expected = run(cpu, inputs, outputs);
  auto actual = run(npu, inputs, outputs);

  std::printf("npuflow demo: %s (optimization level %s)\n", config.model_path.c_str(),
              optimization_level_name(config.optimization));
  for (const auto& [what, counts] : by_matcher) {
    if (what == "vision encoders" && counts.second == 0) continue;
    std::printf("  %s claimed: %d / %d\n", what.c_str(), counts.first, counts.second);
  }
  const Difference difference = compare_outputs(expected, actual, outputs, true);
  if (difference.integer_values > 0) {
    std::printf(
        "  worst LSB difference (int8 outputs, direct or dequantized): %lld (%lld of %lld "
        "values differ)\n",
        static_cast<long long>(difference.worst_lsb), static_cast<long long>(difference.differing),
        static_cast<long long>(difference.integer_values));
    // The CPU EP's float path (DequantizeLinear, float MatMul, QuantizeLinear: no integer kernel)
    // as a second reference: where ONNX Runtime's own u8 x s8 kernels saturate int16 pair sums
    // (x86 CPUs without VNNI), the two CPU EP paths disagree and the float path is the faithful
    // one.
    SessionConfig float_config = config;
    float_config.optimization = ORT_DISABLE_ALL;
    Ort::Session float_path = harness.cpu_session(float_config);
    auto reference = run(float_path, inputs, outputs);
    const Difference against_float = compare_outputs(reference, actual, outputs, false);
    const Difference cpu_ep_own = compare_outputs(reference, expected, outputs, false);
    std::printf(
        "  worst LSB difference against the CPU EP's float path (level disable): %lld (%lld of "
        "%lld values differ); the CPU EP at this level is %lld LSB from it\n",
        static_cast<long long>(against_float.worst_lsb),
        static_cast<long long>(against_float.differing),
        static_cast<long long>(against_float.integer_values),
        static_cast<long long>(cpu_ep_own.worst_lsb));
    if (cpu_ep_own.worst_lsb > 1) {
      std::printf(
          "  note: the CPU EP's integer kernels are off its own float path on this CPU (their "
          "u8 x s8 products saturate in int16 without VNNI); npuflow's int8 GEMM is exact\n");
    }
  }

  // Alternate the two sessions so drift in machine speed hits both alike.
  for (int i = 0; i < 2; ++i) {
    run(cpu, inputs, outputs);
    run(npu, inputs, outputs);
  }
  std::vector<double> cpu_ms, npu_ms;
  using clock = std::chrono::steady_clock;
  for (int i = 0; i < runs; ++i) {
    auto t0 = clock::now();
    run(cpu, inputs, outputs);
    auto t1 = clock::now();
    run(npu, inputs, outputs);
    auto t2 = clock::now();
    cpu_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    npu_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
  }
  const double cpu_median = median(cpu_ms), npu_median = median(npu_ms);
  std::printf(
      "  speed: CPU EP %.3f ms, npuflow %.3f ms per run (median of %d): npuflow is %.2fx "
      "the CPU EP\n",
      cpu_median, npu_median, runs, cpu_median / npu_median);
  return 0;
}

}  // namespace npuflow::cli
