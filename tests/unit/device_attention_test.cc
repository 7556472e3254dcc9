// The encoder's attention on a device (ops/device_attention.h): the layout and scale folding
// against host_attention, a per-head bias as one call per head, and the calls it must not send (a
// fully masked row, operands beyond fp16).
#include "ops/device_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "ops/simd.h"
#include "sim/sim_device.h"

namespace npuflow {
namespace {

struct Sequence {
  int64_t tokens = 12, hidden = 64, heads = 2;
  std::vector<float> qkv, bias;
  AttentionShape shape() const { return {tokens, hidden, heads}; }
};

Sequence sequence(uint32_t seed, int64_t heads = 2) {
  Sequence s;
  s.heads = heads;
  s.hidden = 32 * heads;  // head_dim 32, the flash-attention contract's multiple
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  s.qkv.resize(static_cast<size_t>(s.tokens * 3 * s.hidden));
  for (float& v : s.qkv) v = dist(rng);
  s.bias.assign(static_cast<size_t>(s.tokens * s.tokens), 0.0f);
  for (int64_t i = 0; i < s.tokens; ++i) s.bias[i * s.tokens + (i + 3) % s.tokens] = -1e9f;
  return s;
}

TEST(DeviceAttention, MatchesHostAttentionWithAHeadSharedBias) {
  const Sequence s = sequence(1);
  const AttentionBias bias{s.bias.data(), 0, s.tokens, 1};
  const float scale = 0.125f;
  std::vector<float> want(static_cast<size_t>(s.tokens * s.hidden)), got(want.size(), -1.0f);
  host_attention(s.qkv.data(), s.shape(), scale, bias, false, want.data(), {});
  sim::SimDevice sim;
  bool expressible = false;
  ASSERT_TRUE(
      device_attention(sim, s.qkv.data(), s.shape(), scale, bias, got.data(), {}, &expressible)
          .is_ok());
  EXPECT_TRUE(expressible);
  EXPECT_EQ(sim.profile().attention_calls, 1);
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, double(std::abs(got[i] - want[i])));
  EXPECT_LE(worst, 2e-2);  // fp16 operands and scores of |v| ~ 1 values
  EXPECT_GT(worst, 0.0);   // the device's arithmetic, not the host's
}

// Queries over another sequence's keys (a DiT's cross-attention), against a double reference:
// row strides of the caller's buffers, a key count unlike the query count, the scale folded.
TEST(DeviceAttention, CrossAttentionMatchesADoubleReference) {
  const int64_t queries = 37, keys = 19, heads = 3, hd = 32, d = heads * hd;
  std::mt19937 rng(8);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(queries * d)), kv(static_cast<size_t>(keys * 2 * d));
  for (float& v : q) v = dist(rng);
  for (float& v : kv) v = dist(rng);
  const float scale = 1.0f / std::sqrt(float(hd));
  std::vector<float> got(static_cast<size_t>(queries * d), -1.0f);
  sim::SimDevice sim;
  const CrossAttentionOperands operands{.q = q.data(),
                                        .q_stride = d,
                                        .k = kv.data(),
                                        .v = kv.data() + d,
                                        .kv_stride = 2 * d,
                                        .queries = queries,
                                        .keys = keys,
                                        .heads = heads,
                                        .head_dim = hd};
  ASSERT_TRUE(device_cross_attention(sim, operands, scale, got.data(), {}).is_ok());
  EXPECT_EQ(sim.profile().attention_calls, 1);
  double worst = 0;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < queries; ++i) {
      std::vector<double> p(static_cast<size_t>(keys));
      double top = -1e300, total = 0;
      for (int64_t j = 0; j < keys; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < hd; ++c)
          dot += double(q[i * d + h * hd + c]) * kv[j * 2 * d + h * hd + c];
        p[j] = dot * scale;
        top = std::max(top, p[j]);
      }
      for (double& v : p) total += (v = std::exp(v - top));
      for (int64_t c = 0; c < hd; ++c) {
        double want = 0;
        for (int64_t j = 0; j < keys; ++j) want += p[j] / total * kv[j * 2 * d + d + h * hd + c];
        worst = std::max(worst, std::abs(want - got[i * d + h * hd + c]));
      }
    }
  }
  EXPECT_LE(worst, 2e-2);
  // Beyond fp16: refused before the device is called.
  q[5] = 1e6f;
  EXPECT_EQ(device_cross_attention(sim, operands, 1.0f, got.data(), {}).code(),
            StatusCode::kUnsupported);
  EXPECT_EQ(sim.profile().attention_calls, 1);
}

TEST(DeviceAttention, ABiasThatDiffersPerHeadRunsAsOneCallPerHead) {
  Sequence s = sequence(4, 4);
  // Per head: a distinct relative-position-like ramp, and head 2 masks a different key per row.
  std::vector<float> per_head(static_cast<size_t>(s.heads * s.tokens * s.tokens));
  for (int64_t h = 0; h < s.heads; ++h)
    for (int64_t i = 0; i < s.tokens; ++i)
      for (int64_t j = 0; j < s.tokens; ++j)
        per_head[(h * s.tokens + i) * s.tokens + j] =
            h == 2 && j == (i + 1) % s.tokens ? -1e9f
                                              : -0.25f * float(h + 1) * float(std::abs(i - j));
  const AttentionBias by_head{per_head.data(), s.tokens * s.tokens, s.tokens, 1};
  std::vector<float> want(static_cast<size_t>(s.tokens * s.hidden)), got(want.size(), -1.0f);
  host_attention(s.qkv.data(), s.shape(), 0.125f, by_head, false, want.data(), {});
  sim::SimDevice sim;
  bool expressible = false;
  ASSERT_TRUE(
      device_attention(sim, s.qkv.data(), s.shape(), 0.125f, by_head, got.data(), {}, &expressible)
          .is_ok());
  EXPECT_TRUE(expressible);
  EXPECT_EQ(sim.profile().attention_calls, s.heads);
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, double(std::abs(got[i] - want[i])));
  EXPECT_LE(worst, 2e-2);
  EXPECT_GT(worst, 0.0);
  // Each head's own mask reached it: with head 0's bias for every head the output moves.
  const AttentionBias shared{per_head.data(), 0, s.tokens, 1};
  std::vector<float> wrong(want.size());
  host_attention(s.qkv.data(), s.shape(), 0.125f, shared, false, wrong.data(), {});
  double moved = 0;
  for (size_t i = 0; i < want.size(); ++i)
    moved = std::max(moved, double(std::abs(wrong[i] - want[i])));
  EXPECT_GT(moved, 10 * worst);
}

// SAM's decomposed relative-position bias (a 3 x 4 key grid here), given by its factors: the host's
// tiled kernels (vector and portable) hold the double reference to fp32 rounding; on the device
// it is one call carrying the factors (their fp16 roundings and the device's arithmetic within
// 2e-2), or one call per head beside a per-head dense bias; a factor fp16 cannot hold is refused
// before the device is called.
TEST(DeviceAttention, RelativeBiasFromItsFactorsOnHostAndDevice) {
  Sequence s = sequence(5, 4);
  const int64_t grid_h = 3, grid_w = 4, t = s.tokens;
  ASSERT_EQ(grid_h * grid_w, t);
  std::mt19937 rng(6);
  std::normal_distribution<float> factor(0.0f, 2.0f);
  std::vector<float> rows(static_cast<size_t>(s.heads * t * grid_h));
  std::vector<float> cols(static_cast<size_t>(s.heads * t * grid_w));
  for (float& v : rows) v = factor(rng);
  for (float& v : cols) v = factor(rng);
  AttentionBias bias;
  bias.relative = {rows.data(), cols.data(), grid_h, grid_w};
  const float scale = 0.125f;
  const size_t outputs = static_cast<size_t>(t * s.hidden);
  std::vector<float> exact(outputs), plain(outputs);
  host_attention_reference(s.qkv.data(), s.shape(), scale, bias, false, exact.data());
  host_attention_reference(s.qkv.data(), s.shape(), scale, {}, false, plain.data());
  auto worst = [&](const std::vector<float>& a, const std::vector<float>& b) {
    double w = 0;
    for (size_t i = 0; i < a.size(); ++i) w = std::max(w, double(std::abs(a[i] - b[i])));
    return w;
  };
  EXPECT_GT(worst(exact, plain), 0.1);  // the bias moves the result
  for (bool vectors : {false, true}) {
    allow_avx2_kernels(vectors);
    std::vector<float> host(outputs);
    host_attention(s.qkv.data(), s.shape(), scale, bias, false, host.data(), {});
    EXPECT_LE(worst(host, exact), 1e-5) << "vectors " << vectors;
  }
  allow_avx2_kernels(true);
  sim::SimDevice sim;
  bool expressible = false;
  std::vector<float> got(outputs);
  ASSERT_TRUE(
      device_attention(sim, s.qkv.data(), s.shape(), scale, bias, got.data(), {}, &expressible)
          .is_ok());
  EXPECT_TRUE(expressible);
  EXPECT_EQ(sim.profile().attention_calls, 1);
  EXPECT_LE(worst(got, exact), 2e-2);
  // With a dense bias that differs per head: one call per head, each with its heads' factors.
  std::vector<float> dense(static_cast<size_t>(s.heads * t * t));
  for (size_t i = 0; i < dense.size(); ++i) dense[i] = -0.1f * float(i % 7);
  AttentionBias both{dense.data(), t * t, t, 1, bias.relative};
  host_attention_reference(s.qkv.data(), s.shape(), scale, both, false, exact.data());
  ASSERT_TRUE(
      device_attention(sim, s.qkv.data(), s.shape(), scale, both, got.data(), {}, &expressible)
          .is_ok());
  EXPECT_EQ(sim.profile().attention_calls, 1 + s.heads);
  EXPECT_LE(worst(got, exact), 2e-2);
  rows[7] = 1e6f;  // beyond fp16
  EXPECT_EQ(
      device_attention(sim, s.qkv.data(), s.shape(), scale, bias, got.data(), {}, &expressible)
          .code(),
      StatusCode::kUnsupported);
  EXPECT_FALSE(expressible);
  EXPECT_EQ(sim.profile().attention_calls, 1 + s.heads);
}

TEST(DeviceAttention, RefusesWhatOneFp16MaskCannotSayWithoutCallingTheDevice) {
  Sequence s = sequence(2);
  sim::SimDevice sim;
  std::vector<float> out(static_cast<size_t>(s.tokens * s.hidden));
  bool expressible = true;
  Status status = Status::ok();

  // Row 4 masked everywhere (-1e9 is -inf in fp16).
  for (int64_t j = 0; j < s.tokens; ++j) s.bias[4 * s.tokens + j] = -1e9f;
  const AttentionBias masked{s.bias.data(), 0, s.tokens, 1};
  status =
      device_attention(sim, s.qkv.data(), s.shape(), 0.125f, masked, out.data(), {}, &expressible);
  EXPECT_NE(status.message().find("every key masked"), std::string::npos) << status.to_string();
  EXPECT_FALSE(expressible);

  Sequence big = sequence(3);
  big.qkv[5] = 1e6f;  // a q value beyond fp16
  status =
      device_attention(sim, big.qkv.data(), big.shape(), 0.125f, {}, out.data(), {}, &expressible);
  EXPECT_EQ(status.code(), StatusCode::kUnsupported);
  EXPECT_FALSE(expressible);
  EXPECT_EQ(sim.profile().attention_calls, 0);
}

}  // namespace
}  // namespace npuflow
