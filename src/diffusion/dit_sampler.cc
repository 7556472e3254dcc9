#include "diffusion/dit_sampler.h"

#include <chrono>
#include <cmath>
#include <optional>

#include "core/strings.h"
#include "diffusion/flow_sampler.h"

namespace npuflow::diffusion {
namespace {

uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double unit_interval(uint64_t bits) {
  return double(bits >> 11) * 0x1.0p-53;
}

}  // namespace

std::vector<float> seeded_noise(uint32_t seed, size_t count) {
  std::vector<float> noise(count);
  const uint64_t base = uint64_t(seed) << 32;
  for (size_t i = 0; i < count; ++i) {
    const double u1 = unit_interval(splitmix64(base + 2 * uint64_t(i)));
    const double u2 = unit_interval(splitmix64(base + 2 * uint64_t(i) + 1));
    noise[i] = static_cast<float>(std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(2.0 * M_PI * u2));
  }
  return noise;
}

Result<SampleReport> sample(DitModel& model, const float* context, const SampleOptions& options,
                            std::vector<float>& latent, const ExecContext& exec,
                            const StepCallback& on_step, DitTrace* first_trace) {
  const DitConfig& c = model.config();
  if (options.seed >= (1u << 31)) return invalid_argument("sampler: the seed must be below 2^31");
  if (!std::isfinite(options.cfg)) return invalid_argument("sampler: cfg must be finite");
  auto sigmas = discrete_flow_sigmas(options.steps, options.shift);
  if (!sigmas.is_ok()) return sigmas.status();
  std::optional<SpectrumForecaster> forecaster;
  if (options.spectrum) {
    auto created = SpectrumForecaster::create(options.spectrum_options, options.steps,
                                              options.spectrum_schedule);
    if (!created.is_ok()) return created.status();
    forecaster.emplace(std::move(created).value());
  }
  const auto start = std::chrono::steady_clock::now();
  const size_t size = static_cast<size_t>(c.latent_channels * options.height * options.width);
  latent = seeded_noise(options.seed, size);
  for (float& v : latent) v *= sigmas.value()[0];
  std::vector<float> x0(size), v_cond(size), v_uncond(size);
  SampleReport report;
  for (int step = 0; step < options.steps; ++step) {
    const float sigma = sigmas.value()[step];
    const bool forecast = forecaster && forecaster->should_forecast();
    if (forecast) {
      NPUFLOW_RETURN_IF_ERROR(forecaster->forecast(x0));
      report.forecast_steps.push_back(step + 1);
    } else {
      NPUFLOW_RETURN_IF_ERROR(model.forward(latent.data(), options.height, options.width, sigma,
                                            context, v_cond.data(), exec,
                                            step == 0 ? first_trace : nullptr));
      ++report.evaluations;
      if (options.cfg != 1.0f) {
        NPUFLOW_RETURN_IF_ERROR(model.forward(latent.data(), options.height, options.width, sigma,
                                              nullptr, v_uncond.data(), exec));
        ++report.evaluations;
        for (size_t i = 0; i < size; ++i)
          v_cond[i] = v_uncond[i] + options.cfg * (v_cond[i] - v_uncond[i]);
      }
      // Flow prediction: c_skip = 1, c_out = -sigma.
      for (size_t i = 0; i < size; ++i) x0[i] = v_cond[i] * -sigma + latent[i];
      if (forecaster) NPUFLOW_RETURN_IF_ERROR(forecaster->record(x0));
      report.computed_steps.push_back(step + 1);
    }
    NPUFLOW_RETURN_IF_ERROR(euler_step(latent, x0, sigma, sigmas.value()[step + 1]));
    if (on_step) on_step(step + 1, options.steps, forecast);
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (float v : latent)
    if (!std::isfinite(v))
      return internal_error("sampler: the latent is not finite (the model diverged)");
  return report;
}

}  // namespace npuflow::diffusion
