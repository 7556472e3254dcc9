// The sim's flash attention (sim/sim_attention.h) against the host's reference, and what the
// simulated device does around it: injected failures and corruption, and the cost it charges.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "host/host_device.h"
#include "sim/cost_model.h"
#include "sim/sim_device.h"

namespace npuflow {
namespace {

struct Operands {
  std::vector<uint16_t> q, k, v, out;
  Fp16Attention call;
};

std::vector<uint16_t> halves(size_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<uint16_t> values(count);
  for (uint16_t& value : values) value = float_to_half_bits(dist(rng));
  return values;
}

Operands operands(int64_t t, int64_t kv, int64_t hd, int64_t heads, uint32_t seed) {
  std::mt19937 rng(seed);
  Operands o;
  o.q = halves(static_cast<size_t>(heads * t * hd), rng);
  o.k = halves(static_cast<size_t>(heads * kv * hd), rng);
  o.v = halves(static_cast<size_t>(heads * hd * kv), rng);
  o.out.assign(static_cast<size_t>(heads * t * hd), 0);
  o.call = Fp16Attention{t,      kv,         hd,         hd,         heads,   heads,
                         0.125f, o.q.data(), o.k.data(), o.v.data(), nullptr, o.out.data()};
  return o;
}

// The library rounds the scores and P to fp16 (P twice) where the host keeps fp32: the results
// differ, by a few fp16 ulps of 1 at most.
TEST(SimAttention, DiffersFromTheHostOnlyByTheLibrarysFp16Roundings) {
  Operands on_sim = operands(16, 100, 64, 2, 1), on_host = operands(16, 100, 64, 2, 1);
  sim::SimDevice sim;
  HostDevice host{DeviceOptions{}};
  ASSERT_TRUE(sim.attention_fp16(on_sim.call, {}).is_ok());
  ASSERT_TRUE(host.attention_fp16(on_host.call, {}).is_ok());
  int differing = 0;
  double worst = 0;
  for (size_t i = 0; i < on_sim.out.size(); ++i) {
    const double a = half_bits_to_float(on_sim.out[i]), b = half_bits_to_float(on_host.out[i]);
    differing += a != b;
    worst = std::max(worst, std::abs(a - b));
  }
  EXPECT_GT(differing, 0);
  EXPECT_LE(worst, 4e-3);
}

TEST(SimAttention, InjectedFailureLeavesGarbageAndSaysSo) {
  sim::SimOptions options;
  options.fail_every = 1;
  sim::SimDevice sim(options);
  Operands o = operands(8, 32, 32, 2, 2);
  const Status status = sim.attention_fp16(o.call, {});
  EXPECT_EQ(status.code(), StatusCode::kDeviceFailure);
  EXPECT_NE(status.message().find("ROCKET_E_DEVICE"), std::string::npos);
  EXPECT_EQ(o.out[0], 0x5a5a);
  EXPECT_EQ(sim.profile().failed, 1);
}

TEST(SimAttention, CorruptionMovesOnlyTheFirstElementFarOff) {
  sim::SimOptions options;
  options.corrupt_every = 1;
  sim::SimDevice corrupting(options), clean;
  Operands bad = operands(8, 32, 32, 2, 3), good = operands(8, 32, 32, 2, 3);
  ASSERT_TRUE(corrupting.attention_fp16(bad.call, {}).is_ok());
  ASSERT_TRUE(clean.attention_fp16(good.call, {}).is_ok());
  EXPECT_GT(std::abs(half_bits_to_float(bad.out[0]) - half_bits_to_float(good.out[0])), 100.0f);
  EXPECT_TRUE(std::equal(bad.out.begin() + 1, bad.out.end(), good.out.begin() + 1));
  EXPECT_EQ(corrupting.profile().corrupted, 1);
}

TEST(SimAttention, ChargesTheCostModelsAttention) {
  sim::SimDevice sim;
  Operands o = operands(64, 64, 64, 4, 4);
  ASSERT_TRUE(sim.attention_fp16(o.call, {}).is_ok());
  const sim::CostEstimate cost = sim::CostModel::attention(64, 64, 64, 64, 4, 5, true);
  const sim::SimProfile p = sim.profile();
  EXPECT_EQ(p.attention_calls, 1);
  EXPECT_EQ(p.calls, 1);
  EXPECT_EQ(p.submits, cost.jobs);
  EXPECT_NEAR(p.device_ms, cost.device_us / 1e3, 1e-9);
  EXPECT_GT(p.device_ms, 0.0);
  EXPECT_NE(sim.profile_report().find("1 flash attention"), std::string::npos);
}

// A dense mask and a relative bias's factors are packed with the operands: the sim charges their
// bytes as the cost model prices them, and the factors cost heads x tokens x (grid_h + grid_w),
// not the tokens x kv a materialized bias would.
TEST(SimAttention, ChargesTheBiasItPacks) {
  const int64_t t = 64, grid = 8, kv = grid * grid, heads = 4;
  std::mt19937 rng(5);
  std::vector<uint16_t> mask = halves(static_cast<size_t>(t * kv), rng);
  std::vector<uint16_t> rows = halves(static_cast<size_t>(heads * t * grid), rng);
  std::vector<uint16_t> cols = halves(static_cast<size_t>(heads * t * grid), rng);
  Operands plain = operands(t, kv, 64, heads, 6), biased = operands(t, kv, 64, heads, 6);
  biased.call.mask = mask.data();
  biased.call.relative = {grid, grid, rows.data(), cols.data()};
  const int64_t bytes = attention_bias_bytes(biased.call);
  EXPECT_EQ(bytes, t * kv * 2 + heads * t * 2 * grid * 2);
  sim::SimDevice without, with;
  ASSERT_TRUE(without.attention_fp16(plain.call, {}).is_ok());
  ASSERT_TRUE(with.attention_fp16(biased.call, {}).is_ok());
  const sim::CostEstimate cost = sim::CostModel::attention(t, kv, 64, 64, heads, 5, true, bytes);
  const sim::CostEstimate bare = sim::CostModel::attention(t, kv, 64, 64, heads, 5, true);
  EXPECT_EQ(cost.bytes_packed - bare.bytes_packed, bytes);
  EXPECT_GT(cost.host_us, bare.host_us);
  EXPECT_EQ(cost.device_us, bare.device_us);
  EXPECT_NEAR(with.profile().host_ms, cost.host_us / 1e3, 1e-9);
  EXPECT_NEAR(without.profile().host_ms, bare.host_us / 1e3, 1e-9);
  EXPECT_EQ(with.profile().bytes_packed - without.profile().bytes_packed, bytes);
}

}  // namespace
}  // namespace npuflow
