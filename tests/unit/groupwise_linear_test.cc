// Quantized weights that stay quantized (the ggml backend's native path): the activation's Q8_0,
// Q8_1 and Q8_K block quantizations, and the group-wise linear layer on host and sim (the host's
// kernel alone: host_groupwise_gemm_test.cc).
#include "ops/groupwise_linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "core/fp16.h"
#include "groupwise_test_support.h"
#include "host/host_device.h"
#include "quant/block_quantization.h"
#include "sim/board_cpu_model.h"
#include "sim/sim_device.h"

namespace npuflow {
namespace {

TEST(BlockQuantization, Q8BlocksFollowTheCpuBackendsQuantizer) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const int64_t m = 7, k = 96, blocks = k / kQ8BlockValues;
  std::vector<float> x(m * k);
  for (auto& v : x) v = normal(rng);
  for (int64_t i = 0; i < kQ8BlockValues; ++i) x[i] = 0.0f;  // an all-zero block
  x[kQ8BlockValues + 5] = -40.0f;                            // a block's extreme is negative
  std::vector<int8_t> q(m * k);
  std::vector<float> scales(m * blocks);
  ASSERT_TRUE(quantize_rows_q8_blocks(x.data(), m, k, q.data(), scales.data(), {}));
  EXPECT_EQ(scales[0], 0.0f);
  for (int64_t i = 0; i < kQ8BlockValues; ++i) EXPECT_EQ(q[i], 0);
  EXPECT_EQ(q[kQ8BlockValues + 5], -127);
  for (int64_t row = 0; row < m; ++row) {
    for (int64_t b = 0; b < blocks; ++b) {
      const float* block = x.data() + row * k + b * kQ8BlockValues;
      float amax = 0.0f;
      for (int64_t i = 0; i < kQ8BlockValues; ++i) amax = std::max(amax, std::fabs(block[i]));
      const float d = amax / 127.0f;
      // The stored scale is d rounded to fp16; the values come from the unrounded d.
      EXPECT_EQ(scales[row * blocks + b], half_bits_to_float(float_to_half_bits(d)));
      int extremes = 0;
      for (int64_t i = 0; i < kQ8BlockValues; ++i) {
        const int value = q[row * k + b * kQ8BlockValues + i];
        EXPECT_LE(std::abs(value), 127);
        extremes += std::abs(value) == 127;
        if (d > 0.0f) {
          EXPECT_LE(std::fabs(block[i] / d - value), 0.5f + 1e-4f);
        }
      }
      if (d > 0.0f) {
        EXPECT_GE(extremes, 1);
      }
    }
  }
  // Exact ties (amax = 127 * 2^-4, so x / d is exact): the CPU backend's SIMD kernels round
  // half to even on x86-64 and arm64; ggml's reference rounds away from zero.
  std::vector<float> ties(kQ8BlockValues);
  ties[0] = 127.0f / 16.0f;
  for (int64_t i = 1; i < kQ8BlockValues; ++i) ties[i] = (static_cast<float>(i) - 15.5f) / 16.0f;
  std::vector<int8_t> tq(kQ8BlockValues);
  float tie_scale = 0.0f;
  ASSERT_TRUE(quantize_rows_q8_blocks(ties.data(), 1, kQ8BlockValues, tq.data(), &tie_scale, {}));
  for (int64_t i = 1; i < kQ8BlockValues; ++i) {
    const float halfway = static_cast<float>(i) - 15.5f;
#if defined(__x86_64__) || defined(__aarch64__)
    EXPECT_EQ(tq[i], static_cast<int8_t>(std::nearbyint(halfway))) << halfway;
    EXPECT_EQ(tq[i] % 2, 0) << halfway;
#else
    EXPECT_EQ(tq[i], static_cast<int8_t>(std::roundf(halfway))) << halfway;
#endif
  }
  x[3 * k + 40] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(quantize_rows_q8_blocks(x.data(), m, k, q.data(), scales.data(), {}));
  x[3 * k + 40] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(quantize_rows_q8_blocks(x.data(), m, k, q.data(), scales.data(), {}));
}

// A Q8_0-style weight: N rows of K int8 values, one scale per 32.
struct BlockWeight {
  std::vector<int8_t> rows;
  std::vector<float> scales;
};

BlockWeight random_block_weight(std::mt19937& rng, int64_t k, int64_t n) {
  std::uniform_int_distribution<int> i8(-127, 127);
  std::uniform_real_distribution<float> scale(0.001f, 0.02f);
  BlockWeight w{std::vector<int8_t>(n * k), std::vector<float>(n * (k / 32))};
  for (auto& v : w.rows) v = static_cast<int8_t>(i8(rng));
  for (auto& v : w.scales) v = scale(rng);
  return w;
}

TEST(GroupwiseLinear, HostAndSimComputeTheCpuBackendsQ8Product) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  HostDevice host({});
  sim::SimDevice sim;
  for (const auto& [m, k, n] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {5, 64, 48}, {1, 96, 40}, {17, 128, 64}, {8, 32, 33}}) {
    SCOPED_TRACE(testing::Message() << "m " << m << " k " << k << " n " << n);
    const BlockWeight w = random_block_weight(rng, k, n);
    std::vector<float> x(m * k);
    for (auto& v : x) v = normal(rng);
    // What the CPU backend computes: x quantized per block, then per block exact integer dots
    // scaled by both scales.
    std::vector<int8_t> q(m * k);
    std::vector<float> x_scales(m * (k / 32));
    ASSERT_TRUE(quantize_rows_q8_blocks(x.data(), m, k, q.data(), x_scales.data(), {}));
    std::vector<int8_t> w_kn(k * n);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) w_kn[c * n + r] = w.rows[r * k + c];
    const auto expected = specified_groupwise(q, x_scales, w_kn, w.scales, m, k, n, 32);
    std::vector<float> y_host(m * n), y_sim(m * n);
    for (auto [device, y] : {std::pair<Device*, float*>{&host, y_host.data()},
                             std::pair<Device*, float*>{&sim, y_sim.data()}}) {
      auto packed = pack_groupwise_linear(*device, w.rows.data(), w.scales, k, n, 32);
      ASSERT_TRUE(packed.is_ok()) << packed.status().to_string();
      EXPECT_EQ(packed.value()->k(), k);
      EXPECT_EQ(packed.value()->n(), n);
      const Status status = run_groupwise_linear(*device, x.data(), m, *packed.value(), y, {});
      ASSERT_TRUE(status.is_ok()) << device->name() << ": " << status.to_string();
    }
    EXPECT_EQ(y_host, expected);
    // Exact int8 partials and the same fp32 order: the simulated RK3588 gives the same bits.
    EXPECT_EQ(y_sim, expected);
    // And it is the float product of the dequantized weight, to the activation's 8 bits.
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double exact = 0.0, magnitude = 0.0;
        for (int64_t c = 0; c < k; ++c) {
          const double wv =
              static_cast<double>(w.rows[j * k + c]) * w.scales[j * (k / 32) + c / 32];
          exact += wv * x[i * k + c];
          magnitude += std::fabs(wv * x[i * k + c]);
        }
        EXPECT_NEAR(y_host[i * n + j], exact, magnitude / 100.0);
      }
    }
  }
}

// A GGUF block's scale is an fp16 and a Q4_0 value lies in [-8, 7]: the host then holds the
// weight in the GGUF's own bytes (half a byte per value, two per scale), with the same results.
TEST(GroupwiseLinear, HostKeepsQ4AndFp16ScalesInTheGgufsBytes) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> i4(-8, 7);
  HostDevice host({});
  const int64_t m = 9, k = 96, n = 40, groups = k / 32, np = 48;
  BlockWeight w = random_block_weight(rng, k, n);
  std::vector<float> x(m * k);
  for (auto& v : x) v = normal(rng);
  for (bool q4 : {false, true}) {
    for (bool half_scales : {false, true}) {
      SCOPED_TRACE(testing::Message() << "q4 " << q4 << " fp16 scales " << half_scales);
      BlockWeight v = w;
      if (q4) {
        for (auto& value : v.rows) value = static_cast<int8_t>(i4(rng));
      }
      if (half_scales) {
        for (auto& scale : v.scales) scale = round_to_half(scale);
      }
      auto packed = pack_groupwise_linear(host, v.rows.data(), v.scales, k, n, 32);
      ASSERT_TRUE(packed.is_ok());
      const size_t weight_bytes = static_cast<size_t>(k * np / (q4 ? 2 : 1));
      const size_t scale_bytes = static_cast<size_t>(n * groups) * (half_scales ? 2 : 4);
      EXPECT_EQ(packed.value()->resident_bytes(), weight_bytes + scale_bytes);
      std::vector<int8_t> q(m * k);
      std::vector<float> x_scales(m * groups);
      ASSERT_TRUE(quantize_rows_q8_blocks(x.data(), m, k, q.data(), x_scales.data(), {}));
      std::vector<int8_t> w_kn(k * n);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < k; ++c) w_kn[c * n + r] = v.rows[r * k + c];
      std::vector<float> y(m * n);
      ASSERT_TRUE(run_groupwise_linear(host, x.data(), m, *packed.value(), y.data(), {}).is_ok());
      EXPECT_EQ(y, specified_groupwise(q, x_scales, w_kn, v.scales, m, k, n, 32));
    }
  }
}

// Runs `weight` on x (m rows) and holds every output y[i][j] to sum_g block(i, j, g), computed in
// double, within fp32 rounding of the blocks' magnitudes.
template <typename Block>
void expect_blockwise_product(Device& device, const std::vector<float>& x, int64_t m, int64_t n,
                              int64_t groups, const PackedWeight& weight, Block block) {
  std::vector<float> y(m * n);
  ASSERT_TRUE(run_groupwise_linear(device, x.data(), m, weight, y.data(), {}).is_ok());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double expected = 0.0, magnitude = 0.0;
      for (int64_t g = 0; g < groups; ++g) {
        const double term = block(i, j, g);
        expected += term;
        magnitude += std::fabs(term);
      }
      EXPECT_NEAR(y[i * n + j], expected, 1e-5 * magnitude + 1e-12) << i << "," << j;
    }
  }
}

// A GGUF Q4_1 weight (x = d nibble + m) against the activation's Q8_1 form: the CPU backend's
// sum_g d_w d_x sum(nibble q_x) + m_w s_x, s_x = fp16(d_x' sum(q_x)) with d_x' unrounded. Host
// and sim give it to fp32 rounding, and the host keeps the GGUF's 20 bytes per block.
TEST(GroupwiseLinear, Q4_1MinsGiveTheCpuBackendsQ8_1Product) {
  std::mt19937 rng(21);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> nibble(0, 15);
  std::uniform_real_distribution<float> factor(-0.02f, 0.02f);
  HostDevice host({});
  sim::SimDevice sim;
  const int64_t m = 7, k = 128, n = 48, groups = k / 32;
  std::vector<int8_t> rows(n * k);
  std::vector<int> nibbles(n * k);
  for (int64_t i = 0; i < n * k; ++i) {
    nibbles[i] = nibble(rng);
    rows[i] = static_cast<int8_t>(nibbles[i] - 8);
  }
  std::vector<float> scales(n * groups), mins(n * groups);
  for (auto& v : scales) v = round_to_half(std::fabs(factor(rng)));
  for (auto& v : mins) v = round_to_half(factor(rng));
  std::vector<float> x(m * k);
  for (auto& v : x) v = normal(rng);
  std::vector<int8_t> q(m * k);
  std::vector<float> x_scales(m * groups), x_sums(m * groups);
  ASSERT_TRUE(
      quantize_rows_q8_blocks(x.data(), m, k, q.data(), x_scales.data(), {}, x_sums.data()));
  for (int64_t i = 0; i < m * groups; ++i) {
    int32_t total = 0;
    float amax = 0.0f;
    for (int64_t j = 0; j < 32; ++j) {
      total += q[i * 32 + j];
      amax = std::max(amax, std::fabs(x[i * 32 + j]));
    }
    ASSERT_EQ(x_sums[i], round_to_half(amax / 127.0f * static_cast<float>(total))) << i;
  }
  for (Device* device : std::vector<Device*>{&host, &sim}) {
    SCOPED_TRACE(device->name());
    auto packed = pack_groupwise_linear(*device, rows.data(), scales, k, n, 32, mins);
    ASSERT_TRUE(packed.is_ok()) << packed.status().to_string();
    if (device == &host) {
      EXPECT_EQ(packed.value()->resident_bytes(), static_cast<size_t>(n * k / 2 + n * groups * 4));
    }
    expect_blockwise_product(
        *device, x, m, n, groups, *packed.value(), [&](auto i, auto j, auto g) {
          int64_t dot = 0;
          for (int64_t c = g * 32; c < (g + 1) * 32; ++c) dot += nibbles[j * k + c] * q[i * k + c];
          return double{scales[j * groups + g]} * x_scales[i * groups + g] * dot +
                 double{mins[j * groups + g]} * x_sums[i * groups + g];
        });
  }
  EXPECT_EQ(pack_groupwise_linear(host, rows.data(), scales, k, n, 32, {1.0f}).status().code(),
            StatusCode::kInvalidArgument);
}

// A GGUF Q4_K weight (x = d sc nibble - dmin m per 32, d and dmin fp16 per 256, sc and m 6-bit)
// against the activation's Q8_K form (one fp32 d_x per 256, quantize_row_q8_K_ref): the CPU
// backend's sum_b d_x (d sum_j sc_j dot_j - dmin sum_j m_j sum(q_x,j)). Host and sim give it to
// fp32 rounding; the host keeps the GGUF's 144 bytes per 256 values but for one byte per 6-bit
// factor (8 bytes more than their 12 packed ones).
TEST(GroupwiseLinear, Q4_KSubBlockFactorsGiveTheCpuBackendsQ8_KProduct) {
  std::mt19937 rng(22);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> nibble(0, 15), six_bits(0, 63);
  std::uniform_real_distribution<float> super(0.0005f, 0.002f);
  HostDevice host({});
  sim::SimDevice sim;
  const int64_t m = 5, k = 512, n = 48, groups = k / 32, supers = k / 256;
  std::vector<int8_t> rows(n * k);
  std::vector<int> nibbles(n * k);
  for (int64_t i = 0; i < n * k; ++i) {
    nibbles[i] = nibble(rng);
    rows[i] = static_cast<int8_t>(nibbles[i] - 8);
  }
  std::vector<uint16_t> d(n * supers), dmin(n * supers), minus_dmin(n * supers);
  for (int64_t i = 0; i < n * supers; ++i) {
    d[i] = float_to_half_bits(super(rng));
    dmin[i] = float_to_half_bits(super(rng));
    minus_dmin[i] = dmin[i] ^ 0x8000;
  }
  std::vector<uint8_t> sc(n * groups), mn(n * groups);
  for (auto& v : sc) v = static_cast<uint8_t>(six_bits(rng));
  for (auto& v : mn) v = static_cast<uint8_t>(six_bits(rng));
  std::vector<float> x(m * k);
  for (auto& v : x) v = normal(rng);
  std::fill(x.begin() + k + 256, x.begin() + 2 * k, 0.0f);  // an all-zero 256-block: d_x = 0
  // The activation's Q8_K form, checked against quantize_row_q8_K_ref's arithmetic.
  std::vector<int8_t> q(m * k);
  std::vector<float> x_scales(m * groups), x_sums(m * groups);
  ASSERT_TRUE(quantize_rows_q8_k(x.data(), m, k, q.data(), x_scales.data(), x_sums.data(), {}));
  for (int64_t b = 0; b < m * supers; ++b) {
    float max = 0.0f, amax = 0.0f;
    for (int64_t j = b * 256; j < (b + 1) * 256; ++j) {
      if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), max = x[j];
    }
    const float iscale = amax == 0.0f ? 0.0f : -127.0f / max;
    for (int64_t j = b * 256; j < (b + 1) * 256; ++j) {
      ASSERT_EQ(q[j], static_cast<int8_t>(std::min(127.0f, std::nearbyint(iscale * x[j]))));
    }
    for (int64_t g = b * 8; g < (b + 1) * 8; ++g) {
      ASSERT_EQ(x_scales[g], amax == 0.0f ? 0.0f : 1.0f / iscale) << g;
      int32_t total = 0;
      for (int64_t j = g * 32; j < (g + 1) * 32; ++j) total += q[j];
      ASSERT_EQ(x_sums[g], x_scales[g] * static_cast<float>(total)) << g;
    }
  }
  for (Device* device : std::vector<Device*>{&host, &sim}) {
    SCOPED_TRACE(device->name());
    GroupwiseFactors factors{BlockFactors(d, sc, 8), BlockFactors(minus_dmin, mn, 8),
                             ActivationBlocks::kQ8_K};
    auto packed = pack_groupwise_linear(*device, rows.data(), std::move(factors), k, n);
    ASSERT_TRUE(packed.is_ok()) << packed.status().to_string();
    if (device == &host) {
      EXPECT_EQ(packed.value()->resident_bytes(),
                static_cast<size_t>(n * k / 2 + 2 * (n * supers * 2 + n * groups)));
    }
    expect_blockwise_product(
        *device, x, m, n, groups, *packed.value(), [&](auto i, auto j, auto g) {
          int64_t dot = 0, sum = 0;
          for (int64_t c = g * 32; c < (g + 1) * 32; ++c) {
            dot += nibbles[j * k + c] * q[i * k + c];
            sum += q[i * k + c];
          }
          const int64_t b = j * supers + g / 8;
          return double{x_scales[i * groups + g]} *
                 (double{half_bits_to_float(d[b])} * sc[j * groups + g] * dot -
                  double{half_bits_to_float(dmin[b])} * mn[j * groups + g] * sum);
        });
  }
  // Q8_K needs whole 256-blocks, and mins (when it has them) one per scale, at group 32 only.
  const int64_t short_k = 288;
  EXPECT_EQ(pack_groupwise_linear(
                host, rows.data(),
                {BlockFactors(std::vector<float>(n * 9, 1.0f)),
                 BlockFactors(std::vector<float>(n * 9, 1.0f)), ActivationBlocks::kQ8_K},
                short_k, n)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      pack_groupwise_linear(host, rows.data(),
                            {BlockFactors(d, sc, 8), BlockFactors(std::vector<float>(n, 1.0f)),
                             ActivationBlocks::kQ8_K},
                            k, n)
          .status()
          .code(),
      StatusCode::kInvalidArgument);
  std::vector<uint8_t> sc16(n * k / 16, 1);
  EXPECT_EQ(pack_groupwise_linear(host, rows.data(),
                                  {BlockFactors(d, sc16, 16), BlockFactors(d, sc16, 16),
                                   ActivationBlocks::kQ8_K, 8, 16},
                                  k, n)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
}

// A GGUF Q6_K weight's form (x = d sc q per 16 values, q in [-32, 31], sc a signed byte) against
// the activation's Q8_K form at 16-value groups: the host gives the CPU backend's
// sum_g d_x (d sc)_w sum(q q_x) to fp32 rounding, with the groups' d_x those of their 256-blocks
// and no sums; the RK3588's group-wise GEMM takes groups of 32 only and refuses it.
TEST(GroupwiseLinear, Q6_KSixteenValueGroupsGiveTheCpuBackendsQ8_KProduct) {
  std::mt19937 rng(29);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> six_bits(-32, 31), byte(-128, 127);
  std::uniform_real_distribution<float> super(0.0005f, 0.004f);
  HostDevice host({});
  sim::SimDevice sim;
  const int64_t m = 5, k = 512, n = 48, supers = k / 256, groups = k / 16;
  std::vector<int8_t> rows(n * k);
  for (auto& v : rows) v = static_cast<int8_t>(six_bits(rng));
  std::vector<uint16_t> d(n * supers);
  for (auto& v : d) v = float_to_half_bits(super(rng));
  std::vector<int8_t> sc(n * groups);  // signed, as Q6_K's (-128 among them)
  for (auto& v : sc) v = static_cast<int8_t>(byte(rng));
  sc[0] = -128;
  std::vector<float> x(m * k);
  for (auto& v : x) v = normal(rng);
  std::vector<int8_t> q(m * k);
  std::vector<float> x_scales(m * groups), x32(m * k / 32), sums32(m * k / 32);
  ASSERT_TRUE(quantize_rows_q8_k(x.data(), m, k, q.data(), x_scales.data(), nullptr, {}, 16));
  // The same values and scales as at group 32, each 256-block's d on all its 16 groups.
  std::vector<int8_t> q32(m * k);
  ASSERT_TRUE(quantize_rows_q8_k(x.data(), m, k, q32.data(), x32.data(), sums32.data(), {}));
  EXPECT_EQ(q, q32);
  for (int64_t g = 0; g < m * groups; ++g) ASSERT_EQ(x_scales[g], x32[g / 2]) << g;
  GroupwiseFactors factors{BlockFactors(d, sc, 16), BlockFactors(), ActivationBlocks::kQ8_K, 0, 16};
  auto packed = pack_groupwise_linear(host, rows.data(), factors, k, n);
  ASSERT_TRUE(packed.is_ok()) << packed.status().to_string();
  // Six bits per weight (64 values: 6-bit codes on host), an fp16 per 256 and a byte per 16:
  // the GGUF's 210 bytes per 256 values.
  EXPECT_EQ(packed.value()->resident_bytes(),
            static_cast<size_t>(n * k * 6 / 8 + n * supers * 2 + n * groups));
  expect_blockwise_product(host, x, m, n, groups, *packed.value(), [&](auto i, auto j, auto g) {
    int64_t dot = 0;
    for (int64_t c = g * 16; c < (g + 1) * 16; ++c) dot += rows[j * k + c] * q[i * k + c];
    return double{x_scales[i * groups + g]} * half_bits_to_float(d[j * supers + g / 16]) *
           sc[j * groups + g] * static_cast<double>(dot);
  });
  EXPECT_EQ(pack_groupwise_linear(sim, rows.data(), factors, k, n).status().code(),
            StatusCode::kUnsupported);
}

// The min pass runs on the board's CPU beside the NPU's GEMM: the simulated board prices it into
// its host time (two multiply-adds per output and block for Q8_1, one for Q8_K's merged factor),
// and a weight without mins adds nothing.
TEST(GroupwiseLinear, TheSimulatedBoardPricesTheMinPassAsHostWork) {
  std::mt19937 rng(23);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t m = 64, k = 512, n = 96, groups = k / 32;
  std::vector<int8_t> rows(n * k);
  for (auto& v : rows) v = static_cast<int8_t>(static_cast<int>(rng() % 16) - 8);
  std::vector<float> x(m * k), y(m * n);
  for (auto& v : x) v = normal(rng);
  std::vector<uint16_t> d(n * 2, float_to_half_bits(0.01f));
  std::vector<uint8_t> sc(n * groups, 3);
  auto host_ms_of_a_run = [&](GroupwiseFactors factors) {
    sim::SimDevice sim;
    auto packed = pack_groupwise_linear(sim, rows.data(), std::move(factors), k, n);
    EXPECT_TRUE(packed.is_ok());
    const double before = sim.profile().host_ms;
    EXPECT_TRUE(run_groupwise_linear(sim, x.data(), m, *packed.value(), y.data(), {}).is_ok());
    return sim.profile().host_ms - before;
  };
  const std::vector<float> scales(n * groups, 0.01f), mins(n * groups, -0.02f);
  const double plain = host_ms_of_a_run({BlockFactors(scales), BlockFactors(), {}});
  const double q8_1 =
      host_ms_of_a_run({BlockFactors(scales), BlockFactors(mins), ActivationBlocks::kQ8_1});
  const double q8_k =
      host_ms_of_a_run({BlockFactors(d, sc, 8), BlockFactors(d, sc, 8), ActivationBlocks::kQ8_K});
  auto priced = [&](double terms) {
    const double outputs = static_cast<double>(m * n);
    const double bytes = 4.0 * (2.0 * outputs + 2.0 * groups * static_cast<double>(n + m));
    return sim::board_cpu_us(
               {sim::CpuWorkClass::kGemm, 2.0 * terms * outputs * groups, bytes, 0, false, 1},
               sim::CpuPool::kNpuflowHost) /
           1e3;
  };
  EXPECT_GT(q8_1 - plain, 0.0);
  EXPECT_NEAR(q8_1 - plain, priced(2), 1e-9);
  EXPECT_NEAR(q8_k - plain, priced(1), 1e-9);
}

TEST(GroupwiseLinear, RefusesWhatItCannotCarry) {
  std::mt19937 rng(3);
  HostDevice host({});
  const BlockWeight w = random_block_weight(rng, 64, 16);
  EXPECT_EQ(pack_groupwise_linear(host, w.rows.data(), w.scales, 64, 16, 16).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(pack_groupwise_linear(host, w.rows.data(), {1.0f}, 64, 16, 32).status().code(),
            StatusCode::kInvalidArgument);
  auto packed = pack_groupwise_linear(host, w.rows.data(), w.scales, 64, 16, 32);
  ASSERT_TRUE(packed.is_ok());
  std::vector<float> x(2 * 64, 1.0f), y(2 * 16);
  x[70] = std::numeric_limits<float>::quiet_NaN();
  // The host reference carries a NaN through; the quantized path cannot, and says so.
  EXPECT_EQ(run_groupwise_linear(host, x.data(), 2, *packed.value(), y.data(), {}).code(),
            StatusCode::kUnsupported);
}

}  // namespace
}  // namespace npuflow
