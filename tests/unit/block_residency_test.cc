// The DiT lifecycle policy: a prefix of blocks pinned within the budget, the rest streamed; the
// abort gate on available memory.
#include "diffusion/block_residency.h"

#include <gtest/gtest.h>

namespace npuflow::diffusion {
namespace {

TEST(BlockResidency, PinsTheLeadingBlocksThatFitBesideTheSharedLayersAndOneStreamedBlock) {
  // No budget, or one the whole model fits in: everything resident, nothing streamed.
  for (size_t budget : {size_t{0}, size_t{28100}, size_t{1} << 30}) {
    ResidencyPlan all = plan_block_residency(budget, 100, 1000, 28);
    EXPECT_EQ(all.pinned_blocks, 28);
    EXPECT_EQ(all.resident_bytes, 28100u);
    EXPECT_EQ(all.peak_bytes, 28100u);
  }
  // Room for 6 blocks and a bit: 5 pinned and the slot a streamed block runs in.
  ResidencyPlan some = plan_block_residency(6100 + 999, 100, 1000, 28);
  EXPECT_EQ(some.pinned_blocks, 5);
  EXPECT_EQ(some.resident_bytes, 5100u);
  EXPECT_EQ(some.peak_bytes, 6100u);
  EXPECT_EQ(some.shared_bytes, 100u);
  EXPECT_EQ(some.block_bytes, 1000u);
  // One block short of the model: 26 pinned and one slot, the peak within the budget.
  ResidencyPlan short_one = plan_block_residency(28099, 100, 1000, 28);
  EXPECT_EQ(short_one.pinned_blocks, 26);
  EXPECT_LE(short_one.peak_bytes, 28099u);
  // Below the shared layers and one block: nothing pinned; the least a run needs.
  ResidencyPlan none = plan_block_residency(50, 100, 1000, 28);
  EXPECT_EQ(none.pinned_blocks, 0);
  EXPECT_EQ(none.resident_bytes, 100u);
  EXPECT_EQ(none.peak_bytes, 1100u);
  // The peak never exceeds a budget that holds the least a run needs.
  for (size_t budget = 1100; budget < 30000; budget += 37)
    EXPECT_LE(plan_block_residency(budget, 100, 1000, 28).peak_bytes, budget) << budget;
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
