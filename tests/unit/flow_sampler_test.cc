// The FlowMatch schedule against reference/spectrum.md section 3 (Anima's shift 3, 20 steps), and
// the Euler step on a straight flow, where it is exact.
#include "diffusion/flow_sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace npuflow::diffusion {
namespace {

TEST(FlowSampler, TwentyStepsAtShiftThreeAreTheReferenceValues) {
  const std::vector<double> expected = {1.0,    .98184, .96230, .94124, .91846, .89375, .86684,
                                        .83743, .80515, .76957, .73015, .68623, .63699, .58142,
                                        .51819, .44562, .36146, .26270, .14518, .00299, 0.0};
  auto sigmas = discrete_flow_sigmas(20, 3.0f);
  ASSERT_TRUE(sigmas.is_ok());
  ASSERT_EQ(sigmas.value().size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_NEAR(sigmas.value()[i], expected[i], 6e-6) << i;  // five decimals in the table
}

TEST(FlowSampler, ShiftOneIsTheUnshiftedGridAndSigmasFall) {
  for (int steps : {1, 2, 10, 28, 50}) {
    auto plain = discrete_flow_sigmas(steps, 1.0f);
    auto shifted = discrete_flow_sigmas(steps, 3.0f);
    ASSERT_TRUE(plain.is_ok() && shifted.is_ok());
    ASSERT_EQ(plain.value().size(), static_cast<size_t>(steps + 1));
    EXPECT_FLOAT_EQ(plain.value().front(), 1.0f);
    EXPECT_EQ(plain.value().back(), 0.0f);
    for (int i = 0; i < steps; ++i) {
      EXPECT_GT(shifted.value()[i], shifted.value()[i + 1]) << steps << " " << i;
      // The shift moves every interior sigma up (more steps at high noise).
      EXPECT_GE(shifted.value()[i], plain.value()[i]);
    }
    if (steps > 1) {
      EXPECT_NEAR(plain.value()[steps - 1], 0.001, 1e-7);
    }
  }
  EXPECT_FALSE(discrete_flow_sigmas(0).is_ok());
  EXPECT_FALSE(discrete_flow_sigmas(20, 0.0f).is_ok());
  EXPECT_FALSE(discrete_flow_sigmas(20, std::nanf("")).is_ok());
}

// x_t = (1 - sigma) x0 + sigma noise is a straight line in sigma: with the true x0 every Euler
// step lands on it, so 20 steps from pure noise end at x0.
TEST(FlowSampler, EulerIsExactOnAStraightFlow) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal;
  std::vector<float> x0(500), noise(500);
  for (float& v : x0) v = normal(rng);
  for (float& v : noise) v = normal(rng);
  const std::vector<float> sigmas = discrete_flow_sigmas(20).value();
  std::vector<float> x = noise;  // sigma_0 = 1
  for (size_t i = 0; i + 1 < sigmas.size(); ++i) {
    ASSERT_TRUE(euler_step(x, x0, sigmas[i], sigmas[i + 1]).is_ok());
    for (size_t f = 0; f < x.size(); ++f) {
      const double on_line = (1.0 - sigmas[i + 1]) * x0[f] + double(sigmas[i + 1]) * noise[f];
      ASSERT_NEAR(x[f], on_line, 2e-5) << "step " << i;
    }
  }
  std::vector<float> wrong(3);
  EXPECT_FALSE(euler_step(wrong, x0, 1.0f, 0.5f).is_ok());
  EXPECT_FALSE(euler_step(x, x0, 0.0f, 0.0f).is_ok());
}

}  // namespace
}  // namespace npuflow::diffusion
