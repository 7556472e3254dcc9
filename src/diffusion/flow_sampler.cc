#include "diffusion/flow_sampler.h"

#include <cmath>

#include "core/strings.h"

namespace npuflow::diffusion {

float time_snr_shift(float shift, float sigma) {
  if (shift == 1.0f) return sigma;
  return shift * sigma / (1 + (shift - 1) * sigma);
}

Result<std::vector<float>> discrete_flow_sigmas(int steps, float shift) {
  if (steps < 1) return invalid_argument("flow schedule: at least one step");
  if (!std::isfinite(shift) || shift <= 0.0f)
    return invalid_argument("flow schedule: the shift must be a finite number > 0");
  constexpr int kLastTimestep = 999;  // 1000 training timesteps
  auto sigma_at = [&](float t) { return time_snr_shift(shift, (t + 1) / 1000.f); };
  std::vector<float> sigmas;
  sigmas.reserve(steps + 1);
  if (steps == 1) {
    sigmas.push_back(sigma_at(static_cast<float>(kLastTimestep)));
  } else {
    const float stride = static_cast<float>(kLastTimestep) / static_cast<float>(steps - 1);
    for (int i = 0; i < steps; ++i)
      sigmas.push_back(
          sigma_at(static_cast<float>(kLastTimestep) - stride * static_cast<float>(i)));
  }
  sigmas.push_back(0.0f);
  return sigmas;
}

Status euler_step(std::span<float> x, std::span<const float> x0, float sigma, float sigma_next) {
  if (x.size() != x0.size())
    return invalid_argument(str_cat("euler step: x has ", x.size(), " values, x0 ", x0.size()));
  if (!(sigma > 0.0f)) return invalid_argument("euler step: sigma must be > 0");
  const float move = sigma_next - sigma;
  for (size_t f = 0; f < x.size(); ++f) x[f] += (x[f] - x0[f]) / sigma * move;
  return Status::ok();
}

}  // namespace npuflow::diffusion
