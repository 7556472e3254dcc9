// Spectrum forecasting against reference/spectrum.md: the golden weights of the default 20-step
// run (sd.cpp's formula evaluated in float64, four decimals), the computed/forecast schedules,
// the CFG linearity the sampler relies on, and option parsing. Bit-identity with sd.cpp's own
// spectrum.hpp is the differential test in tests/sdcpp/.
#include "diffusion/spectrum.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

namespace npuflow::diffusion {
namespace {

SpectrumForecaster make(const SpectrumOptions& options, int steps) {
  auto created = SpectrumForecaster::create(options, steps);
  EXPECT_TRUE(created.is_ok()) << created.status().to_string();
  return std::move(created).value();
}

std::vector<float> random_latent(std::mt19937& rng, size_t size) {
  std::normal_distribution<float> normal;
  std::vector<float> values(size);
  for (float& v : values) v = normal(rng);
  return values;
}

// The 1-based steps a run computes: drives the forecaster with random latents.
std::vector<int> computed_steps(const SpectrumOptions& options, int steps) {
  SpectrumForecaster forecaster = make(options, steps);
  std::mt19937 rng(7);
  std::vector<int> computed;
  std::vector<float> out(8);
  for (int slot = 0; slot < steps; ++slot) {
    if (forecaster.should_forecast()) {
      EXPECT_TRUE(forecaster.forecast(out).is_ok());
    } else {
      EXPECT_TRUE(forecaster.record(random_latent(rng, out.size())).is_ok());
      computed.push_back(slot + 1);
    }
  }
  EXPECT_EQ(forecaster.slot(), steps);
  EXPECT_EQ(forecaster.evaluations(), static_cast<int>(computed.size()));
  return computed;
}

TEST(Spectrum, DefaultsAreStableDiffusionCpps) {
  const SpectrumOptions o;
  EXPECT_FLOAT_EQ(o.w, 0.40f);
  EXPECT_EQ(o.m, 3);
  EXPECT_FLOAT_EQ(o.lam, 1.0f);
  EXPECT_EQ(o.window, 2);
  EXPECT_FLOAT_EQ(o.flex, 0.5f);
  EXPECT_EQ(o.warmup, 4);
  EXPECT_FLOAT_EQ(o.stop, 0.9f);
}

TEST(Spectrum, TwentyStepScheduleIsThePublishedOne) {
  EXPECT_EQ(computed_steps({}, 20), (std::vector<int>{1, 2, 3, 4, 6, 8, 11, 14, 18, 19, 20}));
}

TEST(Spectrum, ScheduleLengthsAtOtherStepCounts) {
  // spectrum.md 1.4: 13 computed at 28 steps, 14 at 30, 19 at 50. At 10 steps the stop slot is
  // 9, so the window reaches 3 only once (worked by hand; the sd.cpp differential test agrees).
  EXPECT_EQ(computed_steps({}, 10), (std::vector<int>{1, 2, 3, 4, 6, 8, 10}));
  EXPECT_EQ(computed_steps({}, 28).size(), 13u);
  EXPECT_EQ(computed_steps({}, 30).size(), 14u);
  EXPECT_EQ(computed_steps({}, 50).size(), 19u);
  // The last tenth is always computed; no forecast before the warm-up ends.
  for (int steps : {10, 20, 28, 50}) {
    const std::vector<int> computed = computed_steps({}, steps);
    for (int step = 1; step <= 4; ++step)
      EXPECT_NE(std::find(computed.begin(), computed.end(), step), computed.end());
    for (int step = static_cast<int>(0.9f * steps) + 1; step <= steps; ++step)
      EXPECT_NE(std::find(computed.begin(), computed.end(), step), computed.end()) << steps;
  }
}

TEST(Spectrum, WindowOfOneOrZeroNeverForecasts) {
  SpectrumOptions o;
  o.flex = 0.0f;
  for (int window : {0, 1}) {
    o.window = window;
    EXPECT_EQ(computed_steps(o, 20).size(), 20u) << window;
  }
}

struct GoldenRow {
  int step;  // 1-based, a forecast step
  std::vector<double> alpha;
  double chebyshev_sum;  // NaN where the table gives none
};

TEST(Spectrum, WeightsMatchTheGoldenTable) {
  const double none = std::nan("");
  const std::vector<GoldenRow> golden = {
      {5, {.0026, .0535, -.2011, 1.0390}, 0.735},
      {7, {-.0434, .0108, .0594, -.1973, 1.0742}, 0.760},
      {9, {-.0562, -.0116, .0286, .0648, -.1748, 1.0709}, 0.804},
      {10, {-.0698, -.0208, .0237, .0637, -.1689, 1.0829}, none},
      {12, {-.0508, -.0133, .0207, .0789, -.1751, 1.0731}, 0.834},
      {13, {-.0578, -.0191, .0163, .0775, -.1733, 1.0800}, none},
      {15, {-.0391, -.0118, .0365, .0767, -.1767, 1.0548}, none},
      {16, {-.0418, -.0154, .0322, .0730, -.1775, 1.0589}, none},
      {17, {-.0429, -.0181, .0278, .0686, -.1795, 1.0617}, none},
  };
  SpectrumForecaster forecaster = make({}, 20);
  std::mt19937 rng(3);
  std::vector<float> out(4);
  size_t checked = 0;
  for (int slot = 0; slot < 20; ++slot) {
    if (!forecaster.should_forecast()) {
      ASSERT_TRUE(forecaster.record(random_latent(rng, out.size())).is_ok());
      continue;
    }
    ASSERT_LT(checked, golden.size());
    const GoldenRow& row = golden[checked++];
    ASSERT_EQ(row.step, slot + 1);
    const std::vector<double> alpha = forecaster.history_weights();
    ASSERT_EQ(alpha.size(), row.alpha.size()) << "step " << row.step;
    double alpha_sum = 0.0;
    for (size_t k = 0; k < alpha.size(); ++k) {
      // Four decimals in the table, float32 arithmetic here.
      EXPECT_NEAR(alpha[k], row.alpha[k], 6e-5) << "step " << row.step << " k " << k;
      alpha_sum += alpha[k];
    }
    EXPECT_LT(alpha_sum, 1.0) << "the lam penalty on T_0 shrinks toward 0";
    if (!std::isnan(row.chebyshev_sum)) {
      const std::vector<float> ridge = forecaster.chebyshev_weights();
      EXPECT_NEAR(std::accumulate(ridge.begin(), ridge.end(), 0.0), row.chebyshev_sum, 6e-4);
    }
    ASSERT_TRUE(forecaster.forecast(out).is_ok());
  }
  EXPECT_EQ(checked, golden.size());
}

TEST(Spectrum, ForecastIsTheWeightedSumOfTheStoredLatents) {
  SpectrumOptions o;
  o.w = 0.7f;
  o.m = 4;
  o.lam = 0.1f;
  SpectrumForecaster forecaster = make(o, 50);
  std::mt19937 rng(11);
  std::vector<std::vector<float>> stored;
  std::vector<float> out(257);
  int compared = 0;
  for (int slot = 0; slot < 50; ++slot) {
    if (!forecaster.should_forecast()) {
      stored.push_back(random_latent(rng, out.size()));
      ASSERT_TRUE(forecaster.record(stored.back()).is_ok());
      continue;
    }
    const std::vector<double> alpha = forecaster.history_weights();
    ASSERT_TRUE(forecaster.forecast(out).is_ok());
    const size_t first = stored.size() - alpha.size();
    for (size_t f = 0; f < out.size(); ++f) {
      double expected = 0.0;
      for (size_t k = 0; k < alpha.size(); ++k) expected += alpha[k] * stored[first + k][f];
      EXPECT_NEAR(out[f], expected, 1e-5 * (1.0 + std::abs(expected)));
    }
    ++compared;
  }
  EXPECT_GT(compared, 5);
}

// Forecasting the guided x0 (u + s (c - u)) equals guiding the two branches' forecasts, since
// the weights do not depend on the data: why sd.cpp may skip both passes on a forecast step.
TEST(Spectrum, ForecastCommutesWithClassifierFreeGuidance) {
  const float scale = 4.5f;
  SpectrumForecaster guided = make({}, 20), cond = make({}, 20), uncond = make({}, 20);
  std::mt19937 rng(5);
  const size_t size = 300;
  std::vector<float> out_g(size), out_c(size), out_u(size);
  int forecasts = 0;
  for (int slot = 0; slot < 20; ++slot) {
    ASSERT_EQ(guided.should_forecast(), cond.should_forecast());
    if (guided.should_forecast()) {
      ASSERT_TRUE(guided.forecast(out_g).is_ok());
      ASSERT_TRUE(cond.forecast(out_c).is_ok());
      ASSERT_TRUE(uncond.forecast(out_u).is_ok());
      for (size_t f = 0; f < size; ++f) {
        const double combined = out_u[f] + double(scale) * (out_c[f] - out_u[f]);
        EXPECT_NEAR(out_g[f], combined, 2e-5 * (1.0 + std::abs(combined)));
      }
      ++forecasts;
      continue;
    }
    const std::vector<float> c = random_latent(rng, size), u = random_latent(rng, size);
    std::vector<float> g(size);
    for (size_t f = 0; f < size; ++f) g[f] = u[f] + scale * (c[f] - u[f]);
    ASSERT_TRUE(guided.record(g).is_ok());
    ASSERT_TRUE(cond.record(c).is_ok());
    ASSERT_TRUE(uncond.record(u).is_ok());
  }
  EXPECT_EQ(forecasts, 9);
}

// The adaptive schedule forecasts while (slots since the last compute) x the last relative change
// of x0 stays within the threshold: a still x0 is forecast up to the stop slot, a moving one never.
TEST(Spectrum, AdaptiveForecastsWhileTheDriftIsSmall) {
  SpectrumOptions o;
  o.threshold = 0.1f;
  auto run = [&](float step_change) {
    auto created = SpectrumForecaster::create(o, 20, SpectrumSchedule::kAdaptive);
    EXPECT_TRUE(created.is_ok());
    SpectrumForecaster forecaster = std::move(created).value();
    std::vector<int> computed;
    std::vector<float> out(16), x0(16, 1.0f);
    for (int slot = 0; slot < 20; ++slot) {
      if (forecaster.should_forecast()) {
        EXPECT_LE(forecaster.estimated_error(), o.threshold);
        EXPECT_TRUE(forecaster.forecast(out).is_ok());
        continue;
      }
      for (float& v : x0) v *= 1.0f + step_change;
      EXPECT_TRUE(forecaster.record(x0).is_ok());
      computed.push_back(slot + 1);
    }
    return computed;
  };
  // Drift 0.04 per compute: horizons 1 and 2 pass (0.04, 0.08), 3 does not (0.12).
  EXPECT_EQ(run(0.0417f), (std::vector<int>{1, 2, 3, 4, 7, 10, 13, 16, 19, 20}));
  EXPECT_EQ(run(0.5f).size(), 20u);  // always moving: every slot computed
  EXPECT_EQ(run(0.0f), (std::vector<int>{1, 2, 3, 4, 19, 20}));  // still: forecast to the stop
  // The estimate itself: horizon x |h_K - h_K-1| / |h_K|.
  auto created = SpectrumForecaster::create(o, 20, SpectrumSchedule::kAdaptive);
  ASSERT_TRUE(created.is_ok());
  SpectrumForecaster forecaster = std::move(created).value();
  EXPECT_EQ(forecaster.estimated_error(), 0.0);
  ASSERT_TRUE(forecaster.record(std::vector<float>{3.0f, 0.0f}).is_ok());
  ASSERT_TRUE(forecaster.record(std::vector<float>{3.0f, 4.0f}).is_ok());  // change 4, size 5
  EXPECT_NEAR(forecaster.estimated_error(), 0.8, 1e-12);
  EXPECT_TRUE(parse_spectrum_options("threshold=0.3").is_ok());
  EXPECT_FALSE(parse_spectrum_options("threshold=-1").is_ok());
}

TEST(Spectrum, MisuseIsAnErrorNotACrash) {
  SpectrumForecaster forecaster = make({}, 20);
  std::vector<float> out(4);
  EXPECT_FALSE(forecaster.forecast(out).is_ok()) << "nothing stored yet";
  ASSERT_TRUE(forecaster.record(std::vector<float>(4, 1.0f)).is_ok());
  EXPECT_FALSE(forecaster.record(std::vector<float>(5, 1.0f)).is_ok());
  EXPECT_FALSE(forecaster.record(std::vector<float>{}).is_ok());
  ASSERT_TRUE(forecaster.record(std::vector<float>(4, 2.0f)).is_ok());
  std::vector<float> wrong(3);
  EXPECT_FALSE(forecaster.forecast(wrong).is_ok());
  EXPECT_TRUE(forecaster.forecast(out).is_ok());
  EXPECT_FALSE(SpectrumForecaster::create({}, 0).is_ok());
  SpectrumOptions bad;
  bad.m = -1;
  EXPECT_FALSE(SpectrumForecaster::create(bad, 20).is_ok());
}

TEST(Spectrum, OptionsParseStableDiffusionCppKeys) {
  auto parsed = parse_spectrum_options("w=0.3,m=4,lam=0.1,window=3,flex=0.25,warmup=6,stop=0.85");
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().to_string();
  const SpectrumOptions& o = parsed.value();
  EXPECT_FLOAT_EQ(o.w, 0.3f);
  EXPECT_EQ(o.m, 4);
  EXPECT_FLOAT_EQ(o.lam, 0.1f);
  EXPECT_EQ(o.window, 3);
  EXPECT_FLOAT_EQ(o.flex, 0.25f);
  EXPECT_EQ(o.warmup, 6);
  EXPECT_FLOAT_EQ(o.stop, 0.85f);
  // Keys not given keep the base.
  auto partial = parse_spectrum_options("m=2");
  ASSERT_TRUE(partial.is_ok());
  EXPECT_EQ(partial.value().m, 2);
  EXPECT_FLOAT_EQ(partial.value().w, 0.4f);
  EXPECT_TRUE(parse_spectrum_options("").is_ok());
  for (const char* bad :
       {"x=1", "w", "w=", "m=3.5", "m=-1", "m=17", "stop=1.5", "lam=-1", "lam=nan", "w=inf",
        "w=abc", "window=-2", "warmup=1e3", "flex=-0.5", "m=99999999999999999999"}) {
    const auto result = parse_spectrum_options(bad);
    EXPECT_FALSE(result.is_ok()) << bad;
    if (!result.is_ok()) {
      EXPECT_NE(result.status().message().find("spectrum"), std::string::npos) << bad;
    }
  }
}

}  // namespace
}  // namespace npuflow::diffusion
