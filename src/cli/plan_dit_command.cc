// `npuflow plan --dit anima|MODEL.safetensors`: a DiT denoise priced on an RK3588 board by phase
// (src/diffusion/dit_pricing.h), beside seed 002's measured Anima run. Needs no ONNX Runtime.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/strings.h"
#include "diffusion/dit_pricing.h"
#include "diffusion/safetensors.h"
#include "diffusion/spectrum.h"

namespace npuflow::cli {
namespace {

// Seed 002: Anima on the RK3588 through RKNN, 84 subgraphs loaded, run and released per call;
// 20 steps with CFG at 512 x 512 (1024 tokens).
constexpr double kSeed002DenoiseSeconds = 2408.54;
constexpr double kSeed002NpuSecondsPerStep = 76.21;
constexpr double kSeed002OtherSecondsPerStep = 44.19;

constexpr const char* kUsage =
    "plan --dit anima|MODEL.safetensors [--steps N] [--cfg S] [--spectrum] [--json]";

}  // namespace

int plan_dit_command(const std::vector<std::string>& args) {
  std::string target;
  int64_t steps = 20;
  float cfg = 4.0f;
  bool spectrum = false, json = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const bool has_value = i + 1 < args.size();
    if (args[i] == "--dit" && has_value) {
      target = args[++i];
    } else if (args[i] == "--steps" && has_value) {
      const auto value = parse_int(args[++i]);
      if (!value || *value < 1 || *value > 10000) {
        std::fprintf(stderr, "npuflow plan: --steps takes 1..10000\nusage: npuflow %s\n", kUsage);
        return 2;
      }
      steps = *value;
    } else if (args[i] == "--cfg" && has_value) {
      const std::string& text = args[++i];
      char* end = nullptr;
      cfg = std::strtof(text.c_str(), &end);
      if (text.empty() || *end != '\0' || !std::isfinite(cfg)) {
        std::fprintf(stderr, "npuflow plan: --cfg takes a number\nusage: npuflow %s\n", kUsage);
        return 2;
      }
    } else if (args[i] == "--spectrum") {
      spectrum = true;
    } else if (args[i] == "--json") {
      json = true;
    } else {
      std::fprintf(stderr, "npuflow plan: unexpected argument '%s'\nusage: npuflow %s\n",
                   args[i].c_str(), kUsage);
      return 2;
    }
  }
  diffusion::DitConfig config;
  if (target == "anima") {
    config = diffusion::anima_config();
  } else {
    auto file = diffusion::SafetensorsFile::open(target);
    if (!file.is_ok()) {
      std::fprintf(stderr, "npuflow plan: %s\n", file.status().message().c_str());
      return 1;
    }
    auto read = diffusion::read_dit_config(*file.value());
    if (!read.is_ok()) {
      std::fprintf(stderr, "npuflow plan: %s\n", read.status().message().c_str());
      return 1;
    }
    config = read.value();
  }
  // Model evaluations: the fixed Spectrum schedule is content-blind, so it is counted exactly.
  int64_t computed = steps;
  if (spectrum) {
    auto forecaster = diffusion::SpectrumForecaster::create(diffusion::SpectrumOptions{},
                                                            static_cast<int>(steps));
    if (!forecaster.is_ok()) return 1;
    std::vector<float> x0(1, 1.0f);
    for (int64_t step = 0; step < steps; ++step) {
      const Status status = forecaster.value().should_forecast() ? forecaster.value().forecast(x0)
                                                                 : forecaster.value().record(x0);
      if (!status.is_ok()) return 1;
    }
    computed = forecaster.value().evaluations();
  }
  const int64_t forwards = computed * (cfg != 1.0f ? 2 : 1);
  const diffusion::DitDenoiseCost cost =
      diffusion::price_dit_denoise(config, config.image_tokens, forwards);
  const bool anima_run = target == "anima" && steps == 20 && cfg != 1.0f && !spectrum;
  if (json) {
    std::printf(
        "{\"blocks\": %lld, \"hidden\": %lld, \"tokens\": %lld, \"steps\": %lld, "
        "\"forwards\": %lld, \"seconds_per_forward\": %.3f, \"denoise_seconds\": %.2f, "
        "\"phases\": {",
        static_cast<long long>(config.blocks), static_cast<long long>(config.hidden),
        static_cast<long long>(config.image_tokens), static_cast<long long>(steps),
        static_cast<long long>(forwards), cost.us_per_forward * 1e-6, cost.seconds());
    for (size_t i = 0; i < cost.phases.size(); ++i)
      std::printf("%s\"%s\": %.4f", i ? ", " : "", cost.phases[i].name.c_str(),
                  cost.phases[i].us_per_forward * 1e-6);
    std::printf("}, \"seed_002_denoise_seconds\": %.2f}\n", kSeed002DenoiseSeconds);
    return 0;
  }
  std::printf(
      "DiT %lld blocks, D %lld, %lld tokens: %lld steps, %lld forwards%s, priced on an "
      "RK3588 (simulator cost model, weights resident)\n",
      static_cast<long long>(config.blocks), static_cast<long long>(config.hidden),
      static_cast<long long>(config.image_tokens), static_cast<long long>(steps),
      static_cast<long long>(forwards), spectrum ? " (Spectrum)" : "");
  std::printf("%-38s %-5s %12s %12s\n", "phase", "where", "s/forward", "s/denoise");
  for (const diffusion::DitPhaseCost& phase : cost.phases)
    std::printf("%-38s %-5s %12.3f %12.2f\n", phase.name.c_str(), phase.on_npu ? "NPU" : "host",
                phase.us_per_forward * 1e-6, phase.us_per_forward * forwards * 1e-6);
  std::printf("%-38s %-5s %12.3f %12.2f\n", "total", "", cost.us_per_forward * 1e-6,
              cost.seconds());
  if (anima_run) {
    std::printf(
        "seed 002, measured on a board (RKNN, 84 subgraphs loaded and released per call): "
        "%.2f s (%.2f s/step on the NPU, %.2f s/step lifecycle and host): %.2fx of this "
        "plan\n",
        kSeed002DenoiseSeconds, kSeed002NpuSecondsPerStep, kSeed002OtherSecondsPerStep,
        kSeed002DenoiseSeconds / cost.seconds());
  }
  return 0;
}

}  // namespace npuflow::cli
