// The routing rules and the resident-weight cache, without any runtime.
#include "route/matmul_route.h"

#include <gtest/gtest.h>

#include <vector>

#include "host/host_device.h"
#include "ops/float_linear.h"
#include "pack/resident_weights.h"

namespace npuflow {
namespace {

MatmulCandidate prefill(WeightFormat format, int64_t k, int64_t n, int64_t m) {
  MatmulCandidate c;
  c.weight = format;
  c.weight_is_leaf = c.weight_contiguous = c.weight_is_2d = true;
  c.activation_f32 = c.activation_contiguous = c.output_f32 = c.output_contiguous = true;
  c.k = k;
  c.n = n;
  c.m = m;
  return c;
}

TEST(MatmulRoute, RowThresholdsPerWeightKind) {
  MatmulRouting routing{128, 512};
  EXPECT_TRUE(route_matmul(prefill(WeightFormat::kF16, 576, 576, 128), routing).accept);
  EXPECT_STREQ(route_matmul(prefill(WeightFormat::kF16, 576, 576, 127), routing).reason,
               "m_below_min");
  EXPECT_FALSE(route_matmul(prefill(WeightFormat::kQ4_1, 576, 576, 511), routing).accept);
  EXPECT_TRUE(route_matmul(prefill(WeightFormat::kQ4_1, 576, 576, 512), routing).accept);
}

TEST(MatmulRoute, ContractAndStructureRefusalsNameTheirReason) {
  MatmulRouting routing{1, 1};
  EXPECT_STREQ(route_matmul(prefill(WeightFormat::kF32, 100, 64, 8), routing).reason,
               "k_not_multiple_of_32");
  EXPECT_STREQ(route_matmul(prefill(WeightFormat::kQ4_K, 576, 64, 8), routing).reason,
               "k_not_multiple_of_block");
  EXPECT_STREQ(route_matmul(prefill(WeightFormat::kF32, 64, 40, 8), routing).reason,
               "n_not_multiple_of_16");
  EXPECT_STREQ(route_matmul(prefill(WeightFormat::kOther, 64, 64, 8), routing).reason,
               "weight_type");
  auto c = prefill(WeightFormat::kF32, 64, 64, 8);
  c.weight_is_leaf = false;
  EXPECT_STREQ(route_matmul(c, routing).reason, "weight_not_constant");
  c = prefill(WeightFormat::kF32, 64, 64, 8);
  c.activation_f32 = false;
  EXPECT_STREQ(route_matmul(c, routing).reason, "activation_type");
  c = prefill(WeightFormat::kF32, 64, 64, 8);
  c.special_hint = true;
  EXPECT_STREQ(route_matmul(c, routing).reason, "op_hint");
}

class CountingWeight final : public PackedWeight {
 public:
  CountingWeight() : PackedWeight(32, 16, ElementType::kFloat32) {}
  size_t resident_bytes() const override { return 1024; }
};

TEST(ResidentWeightCache, PacksOnceRepacksWhenTheFingerprintChangesAndEvictsOverBudget) {
  ResidentWeightCache cache(2048, EvictionPolicy::kLeastRecentlyUsed);  // room for two weights
  int packs = 0;
  auto packer = [&]() -> Result<std::unique_ptr<PackedWeight>> {
    packs++;
    return std::unique_ptr<PackedWeight>(new CountingWeight());
  };
  int a = 0, b = 0, c = 0;
  WeightFingerprint fa{"a", 1, 32, 16, 11};
  ASSERT_TRUE(cache.get_or_pack(&a, fa, packer).is_ok());
  ASSERT_TRUE(cache.get_or_pack(&a, fa, packer).is_ok());
  EXPECT_EQ(packs, 1);
  WeightFingerprint fa2 = fa;
  fa2.content = 12;
  ASSERT_TRUE(cache.get_or_pack(&a, fa2, packer).is_ok());
  EXPECT_EQ(packs, 2);
  EXPECT_EQ(cache.stats().repacks, 1);
  ASSERT_TRUE(cache.get_or_pack(&b, {"b", 1, 32, 16, 1}, packer).is_ok());
  ASSERT_TRUE(cache.get_or_pack(&c, {"c", 1, 32, 16, 1}, packer).is_ok());
  EXPECT_EQ(cache.stats().evictions, 1);
  EXPECT_EQ(cache.stats().entries, 2);
  EXPECT_EQ(cache.stats().resident_bytes, 2048u);
}

TEST(ResidentWeightCache, ContentHashSeesChanges) {
  std::vector<uint8_t> bytes(1 << 20, 7);
  const uint64_t full = content_hash(bytes.data(), bytes.size(), true);
  const uint64_t sampled = content_hash(bytes.data(), bytes.size(), false);
  bytes[12345] ^= 1;  // between sampled windows
  EXPECT_NE(content_hash(bytes.data(), bytes.size(), true), full);
  bytes[0] ^= 1;  // inside the first window
  EXPECT_NE(content_hash(bytes.data(), bytes.size(), false), sampled);
}

TEST(FloatLinear, DeviceMatchesTheReferenceOnAWeightGivenAsRows) {
  HostDevice device(DeviceOptions{});
  const int64_t k = 64, n = 48, m = 300;  // m spans several row panels
  std::vector<float> w(n * k), x(m * k), y(m * n), ref(m * n);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((i * 37) % 17) - 8.0f;
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 11) % 13) - 6.0f;
  auto packed = pack_linear_weight(device, w.data(), k, n);
  ASSERT_TRUE(packed.is_ok()) << packed.status().to_string();
  ASSERT_TRUE(run_linear(device, x.data(), m, *packed.value(), y.data(), ExecContext{}).is_ok());
  reference_linear(
      x.data(), m, k, n, [&](int64_t row, float* out) { std::copy_n(w.data() + row * k, k, out); },
      ref.data(), ExecContext{});
  EXPECT_EQ(y, ref);  // small integers: exact in fp32 whatever the summation order
}

}  // namespace
}  // namespace npuflow
