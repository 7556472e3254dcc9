// `npuflow diffuse MODEL`: denoises a latent with a DiT (docs/diffusion.md) on the device the
// knobs choose, with classifier-free guidance and optional Spectrum forecasting, and writes it.
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/knobs.h"
#include "core/parallel.h"
#include "core/strings.h"
#include "diffusion/dit_model.h"
#include "diffusion/dit_sampler.h"
#include "diffusion/npy.h"
#include "diffusion/safetensors.h"
#include "route/device_selection.h"

namespace npuflow::cli {
namespace {

constexpr const char* kUsage =
    "diffuse MODEL.safetensors [--steps N] [--cfg S] [--seed K] [--spectrum [adaptive]]\n"
    "        [--spectrum-option w=,m=,lam=,window=,flex=,warmup=,stop=,threshold=]\n"
    "        [--out LATENT.npy]\n"
    "        [--trace DIR] [--height H] [--width W] [--json] [--quiet] [--knob NAME=VALUE]";

int fail(const Status& status) {
  std::fprintf(stderr, "npuflow diffuse: %s\n", status.message().c_str());
  return 1;
}

std::string json_steps(const std::vector<int>& steps) {
  std::vector<std::string> parts;
  for (int s : steps) parts.push_back(std::to_string(s));
  std::string list(1, '[');
  list.append(join(parts, ","));
  list.push_back(']');
  return list;
}

}  // namespace

int diffuse_command(const std::vector<std::string>& args) {
  diffusion::SampleOptions options;
  options.height = options.width = 0;  // 0: the square latent the model's image_tokens give
  std::string out_path, trace_dir, spectrum_text;
  bool json = false, quiet = false;
  std::string bad_value;
  auto own_flag = [&](size_t& i) {
    const std::string& flag = args[i];
    const bool has_value = i + 1 < args.size();
    auto integer = [&](int64_t low, int64_t high, int64_t& into) {
      const auto value = parse_int(args[++i]);
      if (!value || *value < low || *value > high)
        bad_value = flag + " " + args[i];
      else
        into = *value;
    };
    int64_t number = 0;
    if (flag == "--spectrum") {
      options.spectrum = true;
      if (has_value && (args[i + 1] == "adaptive" || args[i + 1] == "fixed")) {
        options.spectrum_schedule = args[++i] == "adaptive" ? diffusion::SpectrumSchedule::kAdaptive
                                                            : diffusion::SpectrumSchedule::kFixed;
      }
    } else if (flag == "--json") {
      json = true;
    } else if (flag == "--quiet") {
      quiet = true;
    } else if (!has_value) {
      return false;
    } else if (flag == "--steps") {
      integer(1, 10000, number);
      options.steps = static_cast<int>(number);
    } else if (flag == "--seed") {
      integer(0, (int64_t{1} << 31) - 1, number);
      options.seed = static_cast<uint32_t>(number);
    } else if (flag == "--height" || flag == "--width") {
      integer(1, 1 << 14, flag == "--height" ? options.height : options.width);
    } else if (flag == "--cfg") {
      char* end = nullptr;
      const std::string& text = args[++i];
      options.cfg = std::strtof(text.c_str(), &end);
      if (text.empty() || *end != '\0') bad_value = flag + " " + text;
    } else if (flag == "--spectrum-option") {
      if (!spectrum_text.empty()) spectrum_text.push_back(',');
      spectrum_text.append(args[++i]);
    } else if (flag == "--out") {
      out_path = args[++i];
    } else if (flag == "--trace") {
      trace_dir = args[++i];
    } else {
      return false;
    }
    return true;
  };
  SessionConfig config;
  std::string unused_ep_library;
  const int parsed =
      parse_model_command("diffuse", kUsage, args, config, unused_ep_library, own_flag);
  if (parsed >= 0) return parsed;
  if (!bad_value.empty()) {
    std::fprintf(stderr, "npuflow diffuse: bad value: %s\nusage: npuflow %s\n", bad_value.c_str(),
                 kUsage);
    return 2;
  }
  auto spectrum = diffusion::parse_spectrum_options(spectrum_text);
  if (!spectrum.is_ok()) return fail(spectrum.status());
  options.spectrum_options = spectrum.value();

  auto knobs = Knobs::resolve([&](const KnobSpec& spec) -> std::optional<std::string> {
    const auto found = config.provider_options.find(spec.name);
    if (found == config.provider_options.end()) return std::nullopt;
    return found->second;
  });
  if (!knobs.is_ok()) return fail(knobs.status());
  auto device = create_device(device_config_from(knobs.value()));
  if (!device.is_ok()) return fail(device.status());
  Logger logger(knobs.value().log_level(), [](LogLevel, const std::string& m) {
    std::fprintf(stderr, "npuflow diffuse: %s\n", m.c_str());
  });

  auto file = diffusion::SafetensorsFile::open(config.model_path);
  if (!file.is_ok()) return fail(file.status());
  diffusion::DitLoadOptions load_options;
  load_options.mem_budget_bytes = static_cast<size_t>(knobs.value().integer("mem_budget_mb")) << 20;
  load_options.mem_floor_bytes = static_cast<uint64_t>(knobs.value().integer("mem_floor_mb")) << 20;
  auto model =
      diffusion::DitModel::load(file.value(), *device.value().device, logger, load_options);
  if (!model.is_ok()) return fail(model.status());
  diffusion::DitModel& dit = *model.value();
  const diffusion::DitConfig& c = dit.config();
  if (options.height == 0 || options.width == 0) {
    const int64_t side = static_cast<int64_t>(std::lround(std::sqrt(double(c.image_tokens))));
    if (side * side != c.image_tokens) {
      std::fprintf(stderr,
                   "npuflow diffuse: the model's %lld image tokens are not a square: give "
                   "--height and --width\n",
                   static_cast<long long>(c.image_tokens));
      return 2;
    }
    if (options.height == 0) options.height = side * c.patch;
    if (options.width == 0) options.width = side * c.patch;
  }
  auto prompt = file.value()->tensor("prompt.context", {c.context_tokens, c.context_dim});
  if (!prompt.is_ok()) return fail(prompt.status());

  const ExecContext exec = openmp_exec_context(static_cast<int>(knobs.value().integer("threads")));
  diffusion::DitTrace trace;
  std::vector<float> latent;
  auto report = diffusion::sample(
      dit, prompt.value().data, options, latent, exec,
      [&](int step, int steps, bool forecast) {
        if (!quiet)
          std::fprintf(stderr, "step %d/%d %s\n", step, steps, forecast ? "forecast" : "computed");
      },
      trace_dir.empty() ? nullptr : &trace);
  if (!report.is_ok()) return fail(report.status());

  const std::vector<int64_t> latent_shape = {c.latent_channels, options.height, options.width};
  if (!out_path.empty()) {
    const Status written = diffusion::write_npy(out_path, latent_shape, latent.data());
    if (!written.is_ok()) return fail(written);
  }
  if (!trace_dir.empty()) {
    ::mkdir(trace_dir.c_str(), 0755);
    const int64_t tokens = (options.height / c.patch) * (options.width / c.patch);
    const std::vector<float> noise = diffusion::seeded_noise(
        options.seed, static_cast<size_t>(latent_shape[0] * latent_shape[1] * latent_shape[2]));
    Status written = diffusion::write_npy(trace_dir + "/noise.npy", latent_shape, noise.data());
    for (size_t b = 0; written.is_ok() && b < trace.blocks.size(); ++b)
      written = diffusion::write_npy(str_cat(trace_dir, "/block_", b, ".npy"), {tokens, c.hidden},
                                     trace.blocks[b].data());
    if (written.is_ok())
      written = diffusion::write_npy(trace_dir + "/final_tokens.npy",
                                     {tokens, c.latent_channels * c.patch * c.patch},
                                     trace.final_tokens.data());
    if (!written.is_ok()) return fail(written);
  }
  const diffusion::SampleReport& r = report.value();
  const diffusion::DitCounters& counters = dit.counters();
  if (json) {
    std::printf(
        "{\"spectrum\": \"%s\", \"computed_steps\": %s, \"forecast_steps\": %s, "
        "\"evaluations\": %lld, "
        "\"seconds\": %.3f, \"device\": \"%s\", \"resident_bytes\": %zu, "
        "\"linear_fallbacks\": %lld, \"attention_on_device\": %lld, \"attention_fallbacks\": "
        "%lld, \"blocks\": %lld, \"pinned_blocks\": %lld, \"block_bytes\": %zu, "
        "\"shared_bytes\": %zu, \"peak_bytes\": %zu, "
        "\"block_packs\": %lld, \"pack_seconds\": %.3f}\n",
        !options.spectrum                                                     ? "off"
        : options.spectrum_schedule == diffusion::SpectrumSchedule::kAdaptive ? "adaptive"
                                                                              : "fixed",
        json_steps(r.computed_steps).c_str(), json_steps(r.forecast_steps).c_str(),
        static_cast<long long>(r.evaluations), r.seconds,
        std::string(device.value().device->name()).c_str(), dit.resident_bytes(),
        static_cast<long long>(counters.linear_fallbacks.load()),
        static_cast<long long>(counters.attention_on_device.load()),
        static_cast<long long>(counters.attention_fallbacks.load()),
        static_cast<long long>(c.blocks), static_cast<long long>(dit.residency().pinned_blocks),
        dit.residency().block_bytes, dit.residency().shared_bytes, dit.residency().peak_bytes,
        static_cast<long long>(counters.block_packs.load()),
        counters.pack_nanoseconds.load() * 1e-9);
  } else {
    std::printf("%d steps on %s: %zu computed, %zu forecast, %lld model evaluations, %.2f s\n",
                options.steps, std::string(device.value().device->name()).c_str(),
                r.computed_steps.size(), r.forecast_steps.size(),
                static_cast<long long>(r.evaluations), r.seconds);
  }
  return 0;
}

}  // namespace npuflow::cli
