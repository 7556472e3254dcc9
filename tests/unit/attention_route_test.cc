// Where encoder attention runs (route/attention_route.h): the knob's three values, and auto's
// threshold being the board model's crossover.
#include "route/attention_route.h"

#include <gtest/gtest.h>

namespace npuflow {
namespace {

TEST(AttentionRoute, ParsesTheKnobsValues) {
  EXPECT_EQ(parse_attention_placement("auto"), AttentionPlacement::kAuto);
  EXPECT_EQ(parse_attention_placement("device"), AttentionPlacement::kDevice);
  EXPECT_EQ(parse_attention_placement("host"), AttentionPlacement::kHost);
  EXPECT_FALSE(parse_attention_placement("npu"));
}

TEST(AttentionRoute, DeviceAndHostAreUnconditional) {
  const AttentionRouteQuery query{64, 12, 5};
  EXPECT_EQ(device_attention_min_tokens(AttentionPlacement::kDevice, query), 1);
  EXPECT_FALSE(device_attention_min_tokens(AttentionPlacement::kHost, query));
}

// A head size outside flash attention's contract never goes to the device, whatever the knob.
TEST(AttentionRoute, HeadSizesOutsideTheContractStayOnTheHost) {
  for (int64_t head_dim : {8, 16, 48, 80}) {
    const AttentionRouteQuery query{head_dim, 12, 5};
    EXPECT_FALSE(device_attention_min_tokens(AttentionPlacement::kDevice, query)) << head_dim;
    EXPECT_FALSE(device_attention_min_tokens(AttentionPlacement::kAuto, query)) << head_dim;
  }
}

// auto's threshold is where the modelled device time first drops below the host's: it is not
// below at the step before. Short sequences stay on the host (docs/simulator.md: mmBERT-base at
// 58 tokens loses with NPU attention), and the host's cost grows with the square of the tokens.
TEST(AttentionRoute, AutoTakesTheDeviceFromTheModelsCrossover) {
  for (const AttentionRouteQuery query :
       {AttentionRouteQuery{64, 12, 5}, AttentionRouteQuery{64, 16, 5},
        AttentionRouteQuery{32, 4, 1}, AttentionRouteQuery{128, 8, 3}}) {
    SCOPED_TRACE(query.head_dim * 1000 + query.heads);
    EXPECT_NEAR(host_attention_us(query, 1024) / host_attention_us(query, 512), 4.0, 0.2);
    const auto from = device_attention_min_tokens(AttentionPlacement::kAuto, query);
    if (!from) {
      EXPECT_GE(device_attention_us(query, 65536), host_attention_us(query, 65536));
      continue;
    }
    EXPECT_GT(*from, 58);
    EXPECT_LT(device_attention_us(query, *from), host_attention_us(query, *from));
    const int64_t before = *from - (*from <= 1024 ? 4 : 64);
    EXPECT_GE(device_attention_us(query, before), host_attention_us(query, before));
  }
}

}  // namespace
}  // namespace npuflow
