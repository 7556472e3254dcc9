// The FlowMatch sampling schedule and Euler step as stable-diffusion.cpp runs an Anima-class DiT:
// the discrete scheduler's timesteps through the SD3 time-SNR shift (default 3), and the plain
// Euler update toward each step's x0. Float arithmetic in sd.cpp's order
// (../shared/reference/spectrum.md section 3).
#pragma once

#include <span>
#include <vector>

#include "core/status.h"

namespace npuflow::diffusion {

inline constexpr float kAnimaFlowShift = 3.0f;

// sigma' = shift sigma / (1 + (shift - 1) sigma); the identity at shift 1.
float time_snr_shift(float shift, float sigma);

// steps + 1 sigmas: t_i = 999 - i (999 / (steps - 1)), sigma_i = shift((t_i + 1) / 1000), then 0.
// One step is sigma(999) then 0. steps >= 1 and a finite shift > 0.
Result<std::vector<float>> discrete_flow_sigmas(int steps, float shift = kAnimaFlowShift);

// x <- x + (x - x0) / sigma * (sigma_next - sigma): the Euler move toward the step's x0 (computed
// or forecast). sigma > 0; x and x0 of one size.
Status euler_step(std::span<float> x, std::span<const float> x0, float sigma, float sigma_next);

}  // namespace npuflow::diffusion
