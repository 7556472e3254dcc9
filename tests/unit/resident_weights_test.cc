// The resident weight cache's eviction policies on the access orders a model produces: every
// weight once per token in layer order (cyclic), MoE experts routed with skew, and a hot set that
// moves. Hit rates are counted, never timed.
#include "pack/resident_weights.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace npuflow {
namespace {

constexpr size_t kWeightBytes = 1024;

class FixedSizeWeight final : public PackedWeight {
 public:
  FixedSizeWeight() : PackedWeight(32, 16, ElementType::kFloat32) {}
  size_t resident_bytes() const override { return kWeightBytes; }
};

struct Replay {
  int64_t hits = 0;
  int64_t requests = 0;
  size_t peak_bytes = 0;
  double hit_rate() const { return requests > 0 ? static_cast<double>(hits) / requests : 0.0; }
};

// Requests `order` (indices into a table of identities) and counts the hits from `count_from` on.
Replay replay(ResidentWeightCache& cache, const std::vector<int>& order, size_t count_from = 0) {
  static std::vector<int> identities(4096);
  auto pack = []() -> Result<std::unique_ptr<PackedWeight>> {
    return std::unique_ptr<PackedWeight>(new FixedSizeWeight());
  };
  Replay r;
  for (size_t i = 0; i < order.size(); ++i) {
    const void* identity = &identities[static_cast<size_t>(order[i])];
    CacheOutcome outcome = CacheOutcome::kPacked;
    auto weight = cache.get_or_pack(identity, {"w", 1, 32, 16, static_cast<uint64_t>(order[i])},
                                    pack, &outcome);
    EXPECT_TRUE(weight.is_ok());
    EXPECT_NE(weight.value(), nullptr);  // kept or not, the caller gets the packed weight
    r.peak_bytes = std::max(r.peak_bytes, cache.stats().resident_bytes);
    if (i < count_from) continue;
    r.requests++;
    if (outcome == CacheOutcome::kHit) r.hits++;
  }
  return r;
}

std::vector<int> cyclic(int weights, int rounds) {
  std::vector<int> order;
  for (int r = 0; r < rounds; ++r) {
    for (int w = 0; w < weights; ++w) order.push_back(w);
  }
  return order;
}

// Per token, each of `layers` layers routes to `used` distinct experts of `experts`, drawn with
// Zipf weights 1/rank^s (each layer its own ranking).
std::vector<int> skewed_moe(int layers, int experts, int used, int tokens, double s,
                            uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int>> ranking(static_cast<size_t>(layers));
  for (auto& r : ranking) {
    r.resize(static_cast<size_t>(experts));
    for (int e = 0; e < experts; ++e) r[static_cast<size_t>(e)] = e;
    std::shuffle(r.begin(), r.end(), rng);
  }
  std::vector<double> weights(static_cast<size_t>(experts));
  for (int e = 0; e < experts; ++e) weights[static_cast<size_t>(e)] = 1.0 / std::pow(e + 1, s);
  std::vector<int> order;
  for (int t = 0; t < tokens; ++t) {
    for (int l = 0; l < layers; ++l) {
      std::vector<double> w = weights;
      for (int k = 0; k < used; ++k) {
        std::discrete_distribution<int> pick(w.begin(), w.end());
        const int rank = pick(rng);
        w[static_cast<size_t>(rank)] = 0.0;  // distinct experts per token
        order.push_back(l * experts + ranking[static_cast<size_t>(l)][static_cast<size_t>(rank)]);
      }
    }
  }
  return order;
}

TEST(EvictionPolicy, UnderCyclicOrderLruNeverHitsAndFrequencyKeepsAFixedSubset) {
  // 20 weights used once per token in the same order, room for 8, 30 tokens.
  const std::vector<int> order = cyclic(20, 30);
  ResidentWeightCache lru(8 * kWeightBytes, EvictionPolicy::kLeastRecentlyUsed);
  ResidentWeightCache lfu(8 * kWeightBytes, EvictionPolicy::kFrequency);
  const Replay by_lru = replay(lru, order);
  const Replay by_lfu = replay(lfu, order);
  EXPECT_EQ(by_lru.hits, 0);
  // The ideal is 8 of every 20 after the first token; aging may trade a few.
  EXPECT_GE(by_lfu.hits, 8 * 29 * 9 / 10) << "of " << by_lfu.requests;
  EXPECT_LE(by_lfu.hits, 8 * 29);
  EXPECT_LE(by_lru.peak_bytes, 8 * kWeightBytes);
  EXPECT_LE(by_lfu.peak_bytes, 8 * kWeightBytes);
  EXPECT_GT(lfu.stats().not_kept, 0);
  EXPECT_EQ(lfu.stats().packs, by_lfu.requests - by_lfu.hits);
}

TEST(EvictionPolicy, FrequencyBeatsLruOnSkewedExpertRoutingAtEveryBudget) {
  // 4 layers x 32 experts, 4 routed per token, 300 tokens; budgets of 10-50% of the experts.
  const std::vector<int> order = skewed_moe(4, 32, 4, 300, 1.0, 7);
  for (int percent : {10, 20, 30, 50}) {
    const size_t budget = static_cast<size_t>(4 * 32 * percent / 100) * kWeightBytes;
    ResidentWeightCache lru(budget, EvictionPolicy::kLeastRecentlyUsed);
    ResidentWeightCache lfu(budget, EvictionPolicy::kFrequency);
    const Replay by_lru = replay(lru, order, order.size() / 3);
    const Replay by_lfu = replay(lfu, order, order.size() / 3);
    std::printf("skewed routing, %d%% of the experts resident: hit rate lru %.0f%%, lfu %.0f%%\n",
                percent, 100 * by_lru.hit_rate(), 100 * by_lfu.hit_rate());
    EXPECT_GT(by_lfu.hit_rate(), by_lru.hit_rate()) << percent << "% budget";
    EXPECT_LE(by_lfu.peak_bytes, budget);
    EXPECT_LE(by_lru.peak_bytes, budget);
  }
}

TEST(EvictionPolicy, FrequencyFollowsAHotSetThatMoves) {
  // 40 weights, room for 10; weights 0-9 hot for 3000 requests, then 20-29.
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> hot(0, 9), any(0, 39), coin(0, 9);
  std::vector<int> order;
  for (int phase = 0; phase < 2; ++phase) {
    for (int i = 0; i < 3000; ++i)
      order.push_back(coin(rng) < 9 ? hot(rng) + 20 * phase : any(rng));
  }
  ResidentWeightCache lfu(10 * kWeightBytes, EvictionPolicy::kFrequency);
  // The second phase's last 1500 requests: the new hot set must have displaced the old.
  const Replay late = replay(lfu, order, 4500);
  EXPECT_GT(late.hit_rate(), 0.8);
}

TEST(EvictionPolicy, WithoutABudgetBothKeepEverything) {
  for (EvictionPolicy policy : {EvictionPolicy::kLeastRecentlyUsed, EvictionPolicy::kFrequency}) {
    ResidentWeightCache cache(0, policy);
    const Replay r = replay(cache, cyclic(50, 3));
    EXPECT_EQ(r.hits, 100);
    EXPECT_EQ(cache.stats().entries, 50);
    EXPECT_EQ(cache.stats().evictions + cache.stats().not_kept, 0);
  }
}

TEST(EvictionPolicy, AWeightThatChangedIsRepackedUnderEitherPolicy) {
  for (EvictionPolicy policy : {EvictionPolicy::kLeastRecentlyUsed, EvictionPolicy::kFrequency}) {
    ResidentWeightCache cache(2 * kWeightBytes, policy);
    int a = 0;
    int packs = 0;
    auto pack = [&]() -> Result<std::unique_ptr<PackedWeight>> {
      packs++;
      return std::unique_ptr<PackedWeight>(new FixedSizeWeight());
    };
    CacheOutcome outcome = CacheOutcome::kHit;
    ASSERT_TRUE(cache.get_or_pack(&a, {"a", 1, 32, 16, 1}, pack, &outcome).is_ok());
    EXPECT_EQ(outcome, CacheOutcome::kPacked);
    ASSERT_TRUE(cache.get_or_pack(&a, {"a", 1, 32, 16, 1}, pack, &outcome).is_ok());
    EXPECT_EQ(outcome, CacheOutcome::kHit);
    ASSERT_TRUE(cache.get_or_pack(&a, {"a", 1, 32, 16, 2}, pack, &outcome).is_ok());
    EXPECT_EQ(outcome, CacheOutcome::kRepacked);
    EXPECT_EQ(packs, 2);
    EXPECT_EQ(cache.stats().entries, 1);
  }
}

}  // namespace
}  // namespace npuflow
