// The board pricing of a DiT denoise: linear in forwards, growing with blocks and tokens, every
// phase priced, the projections and attention on the NPU.
#include "diffusion/dit_pricing.h"

#include <gtest/gtest.h>

namespace npuflow::diffusion {
namespace {

TEST(DitPricing, ScalesWithForwardsBlocksAndTokens) {
  const DitConfig anima = anima_config();
  const DitDenoiseCost twenty = price_dit_denoise(anima, 1024, 40);
  const DitDenoiseCost spectrum = price_dit_denoise(anima, 1024, 22);
  EXPECT_DOUBLE_EQ(twenty.us_per_forward, spectrum.us_per_forward);
  EXPECT_NEAR(twenty.seconds() / spectrum.seconds(), 40.0 / 22.0, 1e-12);
  DitConfig shallow = anima;
  shallow.blocks = 14;
  EXPECT_LT(price_dit_denoise(shallow, 1024, 40).seconds(), twenty.seconds());
  EXPECT_LT(price_dit_denoise(anima, 256, 40).seconds(), twenty.seconds());
  double npu = 0, sum = 0;
  for (const DitPhaseCost& phase : twenty.phases) {
    EXPECT_GT(phase.us_per_forward, 0.0) << phase.name;
    sum += phase.us_per_forward;
    if (phase.on_npu) npu += phase.us_per_forward;
  }
  EXPECT_DOUBLE_EQ(sum, twenty.us_per_forward);
  EXPECT_GT(npu / sum, 0.5) << "the partition puts the GEMMs on the NPU";
}

}  // namespace
}  // namespace npuflow::diffusion
