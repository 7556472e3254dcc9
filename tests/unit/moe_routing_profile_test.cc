#include "route/moe_routing_profile.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace npuflow {
namespace {

TEST(RoutingSkew, GiniIsZeroForEvenRoutingAndGrowsWithConcentration) {
  EXPECT_DOUBLE_EQ(gini({5, 5, 5, 5}), 0.0);
  // All rows on one of four experts: (2*4 - 4 - 1) / 4.
  EXPECT_DOUBLE_EQ(gini({0, 0, 9, 0}), 0.75);
  EXPECT_DOUBLE_EQ(gini({1, 3}), 0.25);  // (-1*1 + 1*3) / (2*4)
  EXPECT_LT(gini({4, 5, 6, 5}), gini({1, 2, 3, 14}));
  EXPECT_DOUBLE_EQ(gini({}), 0.0);
  EXPECT_DOUBLE_EQ(gini({0, 0}), 0.0);
}

TEST(RoutingSkew, TopShareIsTheHitRateOfAStaticHotCache) {
  const std::vector<int64_t> rows{1, 50, 2, 30, 7, 0, 4, 3, 2, 1};  // 100 rows, 10 experts
  EXPECT_DOUBLE_EQ(top_share(rows, 0.1), 0.5);                      // expert 1
  EXPECT_DOUBLE_EQ(top_share(rows, 0.2), 0.8);                      // experts 1 and 3
  EXPECT_DOUBLE_EQ(top_share(rows, 0.25), 0.87);                    // ceil(2.5) = 3 experts
  EXPECT_DOUBLE_EQ(top_share(rows, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(top_share({0, 0}, 0.5), 0.0);
}

TEST(RoutingProfile, SumsCallsPerTensorAndCountsHowTheCacheServedTheirExperts) {
  RoutingProfile profile;
  EXPECT_TRUE(profile.empty());
  profile.record_call("blk.0.ffn_up_exps.weight", {3, 0, 1, 0});
  profile.record_call("blk.0.ffn_up_exps.weight", {1, 0, 3, 0});
  profile.record_expert("blk.0.ffn_up_exps.weight", CacheOutcome::kPacked, 2 << 20);
  profile.record_expert("blk.0.ffn_up_exps.weight", CacheOutcome::kPackedNotKept, 2 << 20);
  profile.record_expert("blk.0.ffn_up_exps.weight", CacheOutcome::kHit, 0);
  profile.record_expert("blk.0.ffn_up_exps.weight", CacheOutcome::kHit, 0);
  profile.record_call("blk.1.ffn_up_exps.weight", {0, 2, 0, 0});
  profile.record_expert("blk.1.ffn_up_exps.weight", CacheOutcome::kPacked, 1 << 20);
  const std::vector<std::string> lines = profile.lines();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0],
            "moe blk.0.ffn_up_exps.weight: calls=2 rows=8 cache_hits=2/4 (50%) packed=2 "
            "not_kept=1 packed_mib=4 experts=4 gini=0.5 hot10=50% hot20=50% hot50=100% "
            "hist={4,0,4,0}");
  EXPECT_EQ(lines[1],
            "moe blk.1.ffn_up_exps.weight: calls=1 rows=2 cache_hits=0/1 (0%) packed=1 "
            "not_kept=0 packed_mib=1 experts=4 gini=0.75 hot10=100% hot20=100% hot50=100% "
            "hist={0,2,0,0}");
  EXPECT_EQ(lines[2],
            "moe total: calls=3 rows=10 cache_hits=2/5 (40%) packed=3 not_kept=1 packed_mib=5");
}

}  // namespace
}  // namespace npuflow
