// The host's paired group-wise kernel (host/groupwise_gemm.h) against the specified arithmetic:
// every kernel this CPU runs, every weight storage (int8 values; 4-, 5- and 6-bit codes read in
// the kernel or decoded per panel of columns; on AVX-512 VNNI, panels rewritten as biased quads),
// bit for bit.
#include <gtest/gtest.h>

#include <bit>
#include <cstdio>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "groupwise_test_support.h"
#include "host/groupwise_gemm.h"
#include "host/host_device.h"
#include "ops/simd.h"

namespace npuflow {
namespace {

TEST(HostGroupwiseGemm, EveryKernelGivesTheSpecifiedBitsOnRandomShapesAndEveryStorage) {
  std::mt19937 rng(2026);
  std::uniform_int_distribution<int> i8(-128, 127);
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  HostDevice device({});
  std::map<int, int> storages_seen;  // code bits -> trials
  int decoded_per_panel[2] = {};     // coded, several row blocks: panels of 16 / 64 columns
  int quad_shapes = 0;
  for (int trial = 0; trial < 140; ++trial) {
    const int64_t group = std::vector<int64_t>{2, 16, 32, 64}[trial % 4];  // 16: Q6_K's
    // Up to 3 row blocks of 8 (a coded weight with more than one is decoded per panel of columns
    // first, in panels of 64 columns from 256 on) and up to 320 columns.
    const int64_t m = 1 + rng() % 20, k = group * (1 + rng() % 5);
    const int64_t n = trial % 4 == 3 ? 240 + rng() % 81 : 1 + rng() % 70;
    // The storages the host holds: int8, and codes with their table. Weights in [-8, 7] (a Q4_0
    // weight's nibble - 8) or MXFP4's 15 values (twice the FP4 ones): 4-bit codes; in [-16, 15]
    // (a Q5_K weight's 5 bits - 16) or a random set of 17 to 31 int8 values: 5-bit codes; in
    // [-32, 31] (a Q6_K weight's 6 bits - 32) or a random set of 33 to 63: 6-bit codes.
    // 0: int8, 1: [-8, 7], 2: MXFP4, 3: [-16, 15], 4: 5-bit set, 5: [-32, 31], 6: 6-bit set.
    const int storage = (trial / 3) % 7;
    static constexpr int8_t kMxfp4[] = {0, 1, 2, 3, 4, 6, 8, 12, -1, -2, -3, -4, -6, -8, -12};
    std::set<int> drawn_set = {-128, 127};
    const size_t set_size = storage == 4 ? 17 + rng() % 15 : 33 + rng() % 31;
    while (drawn_set.size() < set_size) drawn_set.insert(i8(rng));
    const std::vector<int8_t> value_set(drawn_set.begin(), drawn_set.end());
    std::uniform_int_distribution<int> i4(-8, 7), fp4(0, 14), i5(-16, 15), i6(-32, 31);
    std::uniform_int_distribution<size_t> in_set(0, value_set.size() - 1);
    auto weight_value = [&] {
      switch (storage) {
        case 0:
          return static_cast<int8_t>(i8(rng));
        case 1:
          return static_cast<int8_t>(i4(rng));
        case 2:
          return kMxfp4[fp4(rng)];
        case 3:
          return static_cast<int8_t>(i5(rng));
        case 5:
          return static_cast<int8_t>(i6(rng));
        default:
          return value_set[in_set(rng)];
      }
    };
    std::vector<int8_t> a(m * k), w(k * n);
    for (auto& v : a) v = static_cast<int8_t>(i8(rng));
    for (auto& v : w) v = weight_value();
    // Extremes: a row of -128 and a column of the weight's minimum (the int16 pair sums reach
    // 2 * 2^14), and a column of its maximum.
    static constexpr int8_t kLowest[] = {-128, -8, -12, -16, -128, -32, -128};
    static constexpr int8_t kHighest[] = {127, 7, 12, 15, 127, 31, 127};
    for (int64_t kk = 0; kk < k; ++kk) {
      a[kk] = -128;
      w[kk * n] = kLowest[storage];
      w[kk * n + n - 1] = kHighest[storage];
    }
    // Codes whenever the values, with the padding's 0, are at most 64 (a small int8 weight can
    // be, too), in as few bits as hold them.
    std::set<int> distinct(w.begin(), w.end());
    distinct.insert(0);
    const int code_bits = distinct.size() <= 16   ? 4
                          : distinct.size() <= 32 ? 5
                          : distinct.size() <= 64 ? 6
                                                  : 8;
    ASSERT_TRUE(storage == 0 || code_bits != 8);
    ++storages_seen[code_bits];
    if (code_bits != 8 && m > 8) ++decoded_per_panel[n > 255];
    if (m > 8 && group % 4 == 0) ++quad_shapes;  // AVX-512 VNNI: biased quads
    std::vector<float> as(m * (k / group)), ws(n * (k / group));
    for (auto& v : as) v = scale(rng);
    for (auto& v : ws) v = scale(rng);
    const auto expected = specified_groupwise(a, as, w, ws, m, k, n, group);
    auto packed = device.pack_groupwise_weight(w.data(), k, n, ElementType::kInt8, group);
    ASSERT_TRUE(packed.is_ok());
    ASSERT_NE(dynamic_cast<const HostGroupwiseWeight*>(packed.value().get()), nullptr);
    const auto& weight = dynamic_cast<const HostGroupwiseWeight&>(*packed.value());
    ASSERT_EQ(weight.code_bits(), code_bits);
    // A byte per value, half a byte per 4-bit code, and a bit more per code bit above 4.
    const int64_t values = k * ((n + 15) / 16 * 16);
    EXPECT_EQ(
        packed.value()->resident_bytes(),
        static_cast<size_t>(code_bits == 8 ? values : values / 2 + values / 8 * (code_bits - 4)));
    for (GroupwiseKernel kernel : groupwise_kernels_available()) {
      std::vector<float> c(m * n, std::numeric_limits<float>::quiet_NaN());
      host_groupwise_gemm(a.data(), as.data(), m, weight, ws.data(), c.data(), {}, kernel);
      for (int64_t i = 0; i < m * n; ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(c[i]), std::bit_cast<uint32_t>(expected[i]))
            << "trial " << trial << " element " << i << " kernel " << groupwise_kernel_name(kernel)
            << ": " << c[i] << " != " << expected[i] << " (m " << m << " k " << k << " n " << n
            << ")";
      }
    }
    // And through the device, whichever kernel it picks, with the vector kernels on and off.
    for (bool vectors : {false, true}) {
      allow_avx2_kernels(vectors);
      std::vector<float> c(m * n);
      ASSERT_TRUE(
          device.gemm_groupwise(a.data(), as.data(), m, *packed.value(), ws.data(), c.data(), {})
              .is_ok());
      EXPECT_EQ(c, expected);
    }
  }
  allow_avx2_kernels(true);
  // Every storage was reached, each by many shapes.
  for (int bits : {4, 5, 6, 8}) EXPECT_GE(storages_seen[bits], 15) << bits << "-bit storage";
  EXPECT_GE(decoded_per_panel[0], 10);
  EXPECT_GE(decoded_per_panel[1], 5);
  EXPECT_GE(quad_shapes, 20);
  std::string kernels;
  for (GroupwiseKernel kernel : groupwise_kernels_available()) {
    kernels += std::string(" ") + groupwise_kernel_name(kernel);
  }
  std::printf("group-wise kernels checked on this CPU:%s\n", kernels.c_str());
}

}  // namespace
}  // namespace npuflow
