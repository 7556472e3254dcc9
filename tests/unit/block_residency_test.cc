// The DiT lifecycle policy: a prefix of blocks pinned within the budget, the rest streamed; the
// abort gate on available memory.
#include "diffusion/block_residency.h"

#include <gtest/gtest.h>

namespace npuflow::diffusion {
namespace {

TEST(BlockResidency, PinsTheLeadingBlocksThatFitBesideTheSharedLayers) {
  // No budget: everything resident, nothing streamed.
  ResidencyPlan all = plan_block_residency(0, 100, 1000, 28);
  EXPECT_EQ(all.pinned_blocks, 28);
  EXPECT_EQ(all.resident_bytes, 28100u);
  EXPECT_EQ(all.peak_bytes, 28100u);
  // Room for 5 blocks and a bit: 5 pinned, a streamed block on top while it runs.
  ResidencyPlan some = plan_block_residency(5100 + 999, 100, 1000, 28);
  EXPECT_EQ(some.pinned_blocks, 5);
  EXPECT_EQ(some.resident_bytes, 5100u);
  EXPECT_EQ(some.peak_bytes, 6100u);
  // An exact fit pins that block; a budget beyond the model pins all of it.
  EXPECT_EQ(plan_block_residency(6100, 100, 1000, 28).pinned_blocks, 6);
  EXPECT_EQ(plan_block_residency(1u << 30, 100, 1000, 28).pinned_blocks, 28);
  // Below the shared layers: they stay (nothing runs without them), every block streams.
  ResidencyPlan none = plan_block_residency(50, 100, 1000, 28);
  EXPECT_EQ(none.pinned_blocks, 0);
  EXPECT_EQ(none.resident_bytes, 100u);
  EXPECT_EQ(none.peak_bytes, 1100u);
}

TEST(BlockResidency, TheFloorStopsOnlyBelowIt) {
  const uint64_t mib = 1 << 20;
  EXPECT_EQ(memory_floor_violation(0, 1 * mib), "");               // no gate
  EXPECT_EQ(memory_floor_violation(256 * mib, 300 * mib), "");     // room
  EXPECT_EQ(memory_floor_violation(256 * mib, std::nullopt), "");  // unknown: not guessed
  const std::string message = memory_floor_violation(256 * mib, 200 * mib);
  EXPECT_NE(message.find("200 MiB"), std::string::npos) << message;
  EXPECT_NE(message.find("256 MiB"), std::string::npos) << message;
  EXPECT_NE(message.find("NPUFLOW_MEM_FLOOR_MB"), std::string::npos) << message;
#ifdef __linux__
  EXPECT_TRUE(available_memory_bytes().has_value());
#endif
}

}  // namespace
}  // namespace npuflow::diffusion
