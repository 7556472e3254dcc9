// Spectrum step forecasting, with stable-diffusion.cpp's arithmetic: on a forecast step the
// sampler skips the model and takes x0 from a ridge fit of Chebyshev polynomials over the last
// computed x0s, blended with a half-step Taylor extrapolation. The weights depend only on step
// indices, so a forecast is a fixed linear combination of at most max(m + 1, 6) stored latents.
// The math, defaults and golden vectors: ../shared/reference/spectrum.md.
#pragma once

#include <deque>
#include <span>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace npuflow::diffusion {

// sd.cpp's names and defaults (its --cache-option keys: w, m, lam, window, flex, warmup, stop).
struct SpectrumOptions {
  float w = 0.40f;     // Chebyshev share of the blend; 1 - w goes to the Taylor step
  int m = 3;           // Chebyshev degree: m + 1 basis functions
  float lam = 1.0f;    // ridge penalty, on every coefficient (the intercept too)
  int window = 2;      // initial window: a step is computed every floor(window) slots
  float flex = 0.50f;  // window growth per computed step after the warm-up
  int warmup = 4;      // slots always computed at the start
  float stop = 0.90f;  // fraction of the steps after which every slot is computed
  // Adaptive schedule only (not an sd.cpp key): forecast while the estimated forecast error, the
  // relative change between the last two computed x0s times the slots since the last compute,
  // stays at or below this.
  float threshold = 0.12f;
};

// Which slots are forecast: sd.cpp's window rule, or npuflow's error-driven rule (the
// `threshold` option; window and flex are then unused).
enum class SpectrumSchedule { kFixed, kAdaptive };

// Reads "key=value,key=value" over `base`. Unknown keys, a missing '=', values that do not parse
// whole, and values outside what the forecast can use (m < 0 or > kMaxSpectrumDegree, a negative
// or non-finite lam, window, flex, warmup or threshold, stop outside [0, 1], a non-finite w) are
// errors.
inline constexpr int kMaxSpectrumDegree = 16;
Result<SpectrumOptions> parse_spectrum_options(std::string_view text, SpectrumOptions base = {});

// One denoising run's forecaster. Per slot the sampler asks should_forecast(): if true it calls
// forecast() instead of the model, otherwise it runs the model and record()s the guided x0.
class SpectrumForecaster {
 public:
  // Options as parse_spectrum_options checks them; total_steps >= 1.
  static Result<SpectrumForecaster> create(const SpectrumOptions& options, int total_steps,
                                           SpectrumSchedule schedule = SpectrumSchedule::kFixed);

  // Past the warm-up, before the stop step and with two x0s stored; then, on the fixed schedule,
  // not on the window's compute slot (sd.cpp's rule, content-blind), or, on the adaptive one,
  // while estimated_error() <= threshold.
  bool should_forecast() const;
  // The adaptive rule's estimate for the current slot: (slots since the last compute) x
  // |h_K - h_K-1| / |h_K|, the last drift of x0 carried over the forecast's horizon (not divided
  // by the slots between the two computes: measured on the DiT twin, that variant gave a lower
  // PSNR at equal evaluations). 0 before two computes.
  double estimated_error() const;
  // A computed slot: stores x0 (a copy) and advances. Every record() must have the same size.
  Status record(std::span<const float> x0);
  // A forecast slot: writes the forecast x0 into `out` (the stored size) and advances.
  Status forecast(std::span<float> out);

  // The forecast's weight on each stored x0, oldest first (w times the ridge weights, plus the
  // Taylor step's -0.5 and 1.5 on the two newest): what forecast() would combine now. Reports
  // and tests read it; forecast() keeps sd.cpp's order of operations instead.
  std::vector<double> history_weights() const;
  // The ridge weights alone (the Chebyshev part), oldest first.
  std::vector<float> chebyshev_weights() const;

  int slot() const { return slot_; }            // 0-based slots done so far
  int forecasts() const { return forecasts_; }  // forecast slots so far
  int evaluations() const { return slot_ - forecasts_; }
  // Forecasts whose ridge system was not positive definite in float (lam 0 with few points):
  // the diagonal was raised once, as sd.cpp does.
  int pivot_retries() const { return pivot_retries_; }
  int history_size() const { return static_cast<int>(history_.size()); }
  int stop_slot() const { return stop_slot_; }
  const SpectrumOptions& options() const { return options_; }

  // sd.cpp's normalised time of a slot: 2 * slot / 50 - 1, with the 50 fixed whatever the
  // step count (it copies the reference code's 50-step default).
  static float normalized_time(int slot);

 private:
  SpectrumForecaster(const SpectrumOptions& options, int total_steps, SpectrumSchedule schedule);

  SpectrumOptions options_;
  SpectrumSchedule schedule_;
  int last_computed_slot_ = -1;
  double drift_ = 0.0;  // |h_K - h_K-1| / |h_K| of the last two computes
  int capacity_;        // max(m + 1, 6) stored x0s
  int stop_slot_;       // floor(stop * total_steps); 0 disables the stop rule, as in sd.cpp
  int slot_ = 0;
  int forecasts_ = 0;
  int since_compute_ = 0;  // consecutive forecasts since the last computed slot
  int pivot_retries_ = 0;
  float window_;
  std::deque<std::vector<float>> history_;
  std::deque<float> history_times_;
};

}  // namespace npuflow::diffusion
