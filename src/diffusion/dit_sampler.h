// Denoising with a DiT: FlowMatch Euler over sd.cpp's discrete shifted schedule, classifier-free
// guidance against the all-zero context, and optional Spectrum forecasting of x0
// (docs/diffusion.md, "Sampler").
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/parallel.h"
#include "diffusion/dit_model.h"
#include "diffusion/spectrum.h"

namespace npuflow::diffusion {

// The cross-language noise of docs/diffusion.md (splitmix64 and Box-Muller in double, stored as
// float32): value i of `seed`. Seeds are below 2^31.
std::vector<float> seeded_noise(uint32_t seed, size_t count);

struct SampleOptions {
  int steps = 20;
  float cfg = 4.0f;  // 1: the conditional pass alone
  uint32_t seed = 0;
  float shift = 3.0f;
  int64_t height = 64, width = 64;  // the latent's, in latent pixels
  bool spectrum = false;
  SpectrumSchedule spectrum_schedule = SpectrumSchedule::kFixed;
  SpectrumOptions spectrum_options;
};

struct SampleReport {
  std::vector<int> computed_steps;  // 1-based
  std::vector<int> forecast_steps;
  int64_t evaluations = 0;  // model forwards, each CFG pass counted
  double seconds = 0.0;
};

// Called after each step with (1-based step, steps, forecast or not).
using StepCallback = std::function<void(int step, int steps, bool forecast)>;

// Runs the sampler; `latent` receives the final x [C][height][width]. `context` is the prompt's
// [context_tokens][context_dim]. With `first_trace`, the first conditional forward is traced.
Result<SampleReport> sample(DitModel& model, const float* context, const SampleOptions& options,
                            std::vector<float>& latent, const ExecContext& exec,
                            const StepCallback& on_step = nullptr, DitTrace* first_trace = nullptr);

}  // namespace npuflow::diffusion
