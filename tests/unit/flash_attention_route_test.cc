// The routing rules of a runtime's fused attention (route/flash_attention_route.h): every
// structural refusal names its reason, the contract's head sizes, and the two thresholds.
#include "route/flash_attention_route.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace npuflow {
namespace {

// SmolLM2-135M's prefill attention at a 4K context: 9 query heads over 3 kv heads of 64.
FlashAttentionCandidate prefill(int64_t tokens, int64_t kv) {
  FlashAttentionCandidate c;
  c.queries_f32 = c.keys_values_f16 = c.rows_contiguous = c.output_f32 = true;
  c.head_dim = c.dv = 64;
  c.tokens = tokens;
  c.kv = kv;
  c.heads = 9;
  c.kv_heads = 3;
  c.sequences = 1;
  return c;
}

TEST(FlashAttentionRoute, KeysAndQueryRowsFromTheirThresholds) {
  const FlashAttentionRouting routing{1024, 128};
  EXPECT_TRUE(route_flash_attention(prefill(512, 1024), routing).accept);
  EXPECT_STREQ(route_flash_attention(prefill(512, 1023), routing).reason, "kv_below_min");
  EXPECT_STREQ(route_flash_attention(prefill(127, 4096), routing).reason, "tokens_below_min");
  // Decode (one query row) stays on the CPU whatever the context.
  EXPECT_FALSE(route_flash_attention(prefill(1, 1 << 20), routing).accept);
}

// Each mutation of an accepted candidate is refused with its own reason, whatever the sizes.
TEST(FlashAttentionRoute, EveryNearMissNamesItsReason) {
  const FlashAttentionRouting routing{1, 1};
  ASSERT_TRUE(route_flash_attention(prefill(4, 8), routing).accept);
  using Mutation = std::function<void(FlashAttentionCandidate&)>;
  const std::vector<std::pair<std::string, Mutation>> near_misses = {
      {"alibi", [](auto& c) { c.alibi = true; }},
      {"sinks", [](auto& c) { c.sinks = true; }},
      {"softcap", [](auto& c) { c.softcap_valid = false; }},
      {"query_type", [](auto& c) { c.queries_f32 = false; }},
      {"kv_type", [](auto& c) { c.keys_values_f16 = false; }},
      {"mask_type", [](auto& c) { c.mask_f16 = false; }},
      {"mask_per_head", [](auto& c) { c.mask_per_head = true; }},
      {"mask_shape", [](auto& c) { c.mask_covers = false; }},
      {"rows_not_contiguous", [](auto& c) { c.rows_contiguous = false; }},
      {"output_type", [](auto& c) { c.output_f32 = false; }},
      {"empty", [](auto& c) { c.kv = -1; }},
      {"empty", [](auto& c) { c.sequences = 0; }},
      {"heads_not_multiple_of_kv_heads", [](auto& c) { c.kv_heads = 2; }},
      {"head_dim_not_multiple_of_32", [](auto& c) { c.head_dim = 80; }},
      {"dv_not_multiple_of_16", [](auto& c) { c.dv = 72; }},
  };
  for (const auto& [reason, mutate] : near_misses) {
    for (auto [tokens, kv] : {std::pair<int64_t, int64_t>{4, 8}, {512, 4096}}) {
      FlashAttentionCandidate c = prefill(tokens, kv);
      mutate(c);
      const RouteVerdict verdict = route_flash_attention(c, routing);
      EXPECT_FALSE(verdict.accept) << reason;
      EXPECT_EQ(std::string(verdict.reason), reason);
    }
  }
}

// The contract's head sizes: the key head size a multiple of 32, the value head size of 16.
TEST(FlashAttentionRoute, HeadSizesOfTheContract) {
  const FlashAttentionRouting routing{1, 1};
  for (int64_t head_dim = 16; head_dim <= 256; head_dim += 8) {
    for (int64_t dv : {16, 48, 64, 72, 128}) {
      FlashAttentionCandidate c = prefill(8, 8);
      c.head_dim = head_dim;
      c.dv = dv;
      EXPECT_EQ(route_flash_attention(c, routing).accept, head_dim % 32 == 0 && dv % 16 == 0)
          << head_dim << " " << dv;
    }
  }
}

}  // namespace
}  // namespace npuflow
