#include "diffusion/spectrum.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>

#include "core/strings.h"

namespace npuflow::diffusion {
namespace {

// T_0..T_m at tau: T_0 = 1, T_1 = tau, T_j = 2 tau T_{j-1} - T_{j-2}, in float as sd.cpp does.
void chebyshev_row(float tau, int degree, float* row) {
  row[0] = 1.0f;
  if (degree >= 1) row[1] = tau;
  for (int j = 2; j <= degree; ++j) row[j] = 2.0f * tau * row[j - 1] - row[j - 2];
}

// Lower-triangular L with L L^T = a (n x n, row-major); false on a non-positive pivot.
bool cholesky(const std::vector<float>& a, int n, std::vector<float>& lower) {
  lower.assign(static_cast<size_t>(n) * n, 0.0f);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j <= i; ++j) {
      float dot = 0.0f;
      for (int k = 0; k < j; ++k) dot += lower[i * n + k] * lower[j * n + k];
      if (i == j) {
        const float pivot = a[i * n + i] - dot;
        if (pivot <= 0.0f) return false;
        lower[i * n + i] = std::sqrt(pivot);
      } else {
        lower[i * n + j] = (a[i * n + j] - dot) / lower[j * n + j];
      }
    }
  }
  return true;
}

// Solves L L^T x = b by forward then back substitution.
std::vector<float> cholesky_solve(const std::vector<float>& lower, int n,
                                  const std::vector<float>& b) {
  std::vector<float> y(n), x(n, 0.0f);
  for (int i = 0; i < n; ++i) {
    float dot = 0.0f;
    for (int j = 0; j < i; ++j) dot += lower[i * n + j] * y[j];
    y[i] = (b[i] - dot) / lower[i * n + i];
  }
  for (int i = n - 1; i >= 0; --i) {
    float dot = 0.0f;
    for (int j = i + 1; j < n; ++j) dot += lower[j * n + i] * x[j];
    x[i] = (y[i] - dot) / lower[i * n + i];
  }
  return x;
}

// The ridge weights a = Phi (Phi^T Phi + lam I)^-1 phi(tau_at): the Chebyshev fit's value at
// tau_at as a combination of the stored points. On a non-positive pivot the diagonal is raised
// by 1e-4 of its mean once and the result used whatever it is (sd.cpp's safeguard).
std::vector<float> ridge_weights(const std::deque<float>& times, float tau_at, int degree,
                                 float lam, bool* raised_diagonal = nullptr) {
  const int basis = degree + 1;
  const int points = static_cast<int>(times.size());
  std::vector<float> design(static_cast<size_t>(points) * basis);
  for (int k = 0; k < points; ++k) chebyshev_row(times[k], degree, &design[k * basis]);
  std::vector<float> target(basis);
  chebyshev_row(tau_at, degree, target.data());

  std::vector<float> gram(static_cast<size_t>(basis) * basis);
  for (int i = 0; i < basis; ++i) {
    for (int j = 0; j < basis; ++j) {
      float dot = 0.0f;
      for (int k = 0; k < points; ++k) dot += design[k * basis + i] * design[k * basis + j];
      gram[i * basis + j] = dot + (i == j ? lam : 0.0f);
    }
  }
  std::vector<float> lower;
  const bool factored = cholesky(gram, basis, lower);
  if (raised_diagonal != nullptr) *raised_diagonal = !factored;
  if (!factored) {
    float trace = 0.0f;
    for (int i = 0; i < basis; ++i) trace += gram[i * basis + i];
    for (int i = 0; i < basis; ++i) gram[i * basis + i] += 1e-4f * trace / basis;
    (void)cholesky(gram, basis, lower);
  }
  const std::vector<float> solved = cholesky_solve(lower, basis, target);
  std::vector<float> weights(points, 0.0f);
  for (int k = 0; k < points; ++k)
    for (int j = 0; j < basis; ++j) weights[k] += design[k * basis + j] * solved[j];
  return weights;
}

// A whole-token number: std::from_chars for float is missing from GCC 10's library.
std::optional<float> parse_float(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const float value = std::strtof(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return std::nullopt;
  return value;
}

Status check_options(const SpectrumOptions& o) {
  if (!std::isfinite(o.w)) return invalid_argument("spectrum: w must be a finite number");
  if (o.m < 0 || o.m > kMaxSpectrumDegree)
    return invalid_argument(str_cat("spectrum: m must be in [0, ", kMaxSpectrumDegree, "]"));
  if (!std::isfinite(o.lam) || o.lam < 0.0f)
    return invalid_argument("spectrum: lam must be a finite number >= 0");
  if (o.window < 0) return invalid_argument("spectrum: window must be >= 0");
  if (!std::isfinite(o.flex) || o.flex < 0.0f)
    return invalid_argument("spectrum: flex must be a finite number >= 0");
  if (o.warmup < 0) return invalid_argument("spectrum: warmup must be >= 0");
  if (!(o.stop >= 0.0f && o.stop <= 1.0f))
    return invalid_argument("spectrum: stop must be in [0, 1]");
  if (!std::isfinite(o.threshold) || o.threshold < 0.0f)
    return invalid_argument("spectrum: threshold must be a finite number >= 0");
  return Status::ok();
}

}  // namespace

Result<SpectrumOptions> parse_spectrum_options(std::string_view text, SpectrumOptions base) {
  SpectrumOptions options = base;
  size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item(text.substr(start, comma - start));
    start = comma + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos)
      return invalid_argument(str_cat("spectrum option '", item, "' has no '=' (key=value)"));
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    const auto number = parse_float(value);
    const auto whole = parse_int(value);
    const bool integer_key = key == "m" || key == "window" || key == "warmup";
    if (integer_key ? !whole.has_value() : !number.has_value())
      return invalid_argument(str_cat("spectrum option ", key, ": '", value, "' is not ",
                                      integer_key ? "an integer" : "a number"));
    if (integer_key && (*whole < -1'000'000 || *whole > 1'000'000))
      return invalid_argument(str_cat("spectrum option ", key, ": '", value, "' is out of range"));
    if (key == "w") {
      options.w = *number;
    } else if (key == "m") {
      options.m = static_cast<int>(*whole);
    } else if (key == "lam") {
      options.lam = *number;
    } else if (key == "window") {
      options.window = static_cast<int>(*whole);
    } else if (key == "flex") {
      options.flex = *number;
    } else if (key == "warmup") {
      options.warmup = static_cast<int>(*whole);
    } else if (key == "stop") {
      options.stop = *number;
    } else if (key == "threshold") {
      options.threshold = *number;
    } else {
      return invalid_argument(
          str_cat("unknown spectrum option '", key,
                  "' (known: w, m, lam, window, flex, warmup, stop, threshold)"));
    }
  }
  NPUFLOW_RETURN_IF_ERROR(check_options(options));
  return options;
}

Result<SpectrumForecaster> SpectrumForecaster::create(const SpectrumOptions& options,
                                                      int total_steps, SpectrumSchedule schedule) {
  NPUFLOW_RETURN_IF_ERROR(check_options(options));
  if (total_steps < 1) return invalid_argument("spectrum: the run needs at least one step");
  return SpectrumForecaster(options, total_steps, schedule);
}

SpectrumForecaster::SpectrumForecaster(const SpectrumOptions& options, int total_steps,
                                       SpectrumSchedule schedule)
    : options_(options),
      schedule_(schedule),
      capacity_(std::max(options.m + 1, 6)),
      stop_slot_(static_cast<int>(options.stop * static_cast<float>(total_steps))),
      window_(static_cast<float>(options.window)) {}

float SpectrumForecaster::normalized_time(int slot) {
  return (static_cast<float>(slot) / 50.0f) * 2.0f - 1.0f;
}

bool SpectrumForecaster::should_forecast() const {
  if (slot_ < options_.warmup) return false;
  if (stop_slot_ > 0 && slot_ >= stop_slot_) return false;
  if (history_.size() < 2) return false;
  if (schedule_ == SpectrumSchedule::kAdaptive) return estimated_error() <= options_.threshold;
  const int window = std::max(1, static_cast<int>(std::floor(window_)));
  return (since_compute_ + 1) % window != 0;
}

double SpectrumForecaster::estimated_error() const {
  if (history_.size() < 2) return 0.0;
  return double(slot_ - last_computed_slot_) * drift_;
}

Status SpectrumForecaster::record(std::span<const float> x0) {
  if (!history_.empty() && x0.size() != history_.front().size())
    return invalid_argument(str_cat("spectrum: x0 has ", x0.size(), " values, the stored ones ",
                                    history_.front().size()));
  if (x0.empty()) return invalid_argument("spectrum: x0 is empty");
  if (!history_.empty()) {
    double change = 0.0, size = 0.0;
    const std::vector<float>& before = history_.back();
    for (size_t f = 0; f < x0.size(); ++f) {
      change += (double(x0[f]) - before[f]) * (double(x0[f]) - before[f]);
      size += double(x0[f]) * x0[f];
    }
    // A zero latent has no relative drift to measure: never forecast from it.
    drift_ = size > 0.0 ? std::sqrt(change / size) : std::numeric_limits<double>::infinity();
  }
  last_computed_slot_ = slot_;
  history_.emplace_back(x0.begin(), x0.end());
  history_times_.push_back(normalized_time(slot_));
  while (static_cast<int>(history_.size()) > capacity_) {
    history_.pop_front();
    history_times_.pop_front();
  }
  if (slot_ >= options_.warmup) window_ += options_.flex;
  since_compute_ = 0;
  ++slot_;
  return Status::ok();
}

std::vector<float> SpectrumForecaster::chebyshev_weights() const {
  return ridge_weights(history_times_, normalized_time(slot_), options_.m, options_.lam);
}

std::vector<double> SpectrumForecaster::history_weights() const {
  const std::vector<float> ridge = chebyshev_weights();
  std::vector<double> alpha(ridge.size());
  for (size_t k = 0; k < ridge.size(); ++k) alpha[k] = double(options_.w) * ridge[k];
  if (alpha.size() >= 2) {
    const double taylor_share = 1.0 - double(options_.w);
    alpha[alpha.size() - 1] += 1.5 * taylor_share;
    alpha[alpha.size() - 2] -= 0.5 * taylor_share;
  }
  return alpha;
}

Status SpectrumForecaster::forecast(std::span<float> out) {
  if (history_.size() < 2)
    return invalid_argument("spectrum: a forecast needs two computed steps stored");
  if (out.size() != history_.front().size())
    return invalid_argument(str_cat("spectrum: the forecast has room for ", out.size(),
                                    " values, the stored x0s have ", history_.front().size()));
  bool raised_diagonal = false;
  const std::vector<float> ridge = ridge_weights(history_times_, normalized_time(slot_), options_.m,
                                                 options_.lam, &raised_diagonal);
  pivot_retries_ += raised_diagonal ? 1 : 0;
  // Per value: the Chebyshev sum oldest to newest from 0, then (1 - w) taylor + w cheb; the
  // loops run over the history outside for locality, which keeps each value's order.
  std::fill(out.begin(), out.end(), 0.0f);
  for (size_t k = 0; k < history_.size(); ++k) {
    const float weight = ridge[k];
    const float* stored = history_[k].data();
    for (size_t f = 0; f < out.size(); ++f) out[f] += weight * stored[f];
  }
  const float cheb_share = options_.w;
  const float taylor_share = 1.0f - cheb_share;
  const float* newest = history_.back().data();
  const float* before = history_[history_.size() - 2].data();
  for (size_t f = 0; f < out.size(); ++f) {
    const float taylor = newest[f] + 0.5f * (newest[f] - before[f]);
    out[f] = taylor_share * taylor + cheb_share * out[f];
  }
  ++since_compute_;
  ++forecasts_;
  ++slot_;
  return Status::ok();
}

}  // namespace npuflow::diffusion
