// The host device's GEMMs against brute force: exact for integers, at every row count.
#include "host/host_device.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <mutex>
#include <random>
#include <thread>

#include "core/fp16.h"
#include "device/int8_gemm_loop.h"
#include "two_thread_pool.h"

namespace npuflow {
namespace {

template <typename A>
std::vector<int32_t> brute_force(const std::vector<A>& a, const std::vector<int8_t>& w, int64_t m,
                                 int64_t k, int64_t n) {
  std::vector<int32_t> c(m * n, 0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t kk = 0; kk < k; ++kk) c[i * n + j] += int32_t{a[i * k + kk]} * w[kk * n + j];
  return c;
}

template <typename A>
void check_int8(ElementType type, int64_t m, int64_t k, int64_t n, bool on_float = false) {
  std::mt19937 rng(static_cast<uint32_t>(m * 131 + k * 7 + n));
  std::uniform_int_distribution<int> any(-128, 255);
  std::vector<A> a(m * k);
  for (auto& v : a) v = static_cast<A>(any(rng));
  std::vector<int8_t> w(k * n);
  for (auto& v : w) v = static_cast<int8_t>(any(rng) - 64);
  DeviceOptions options;
  options.float_int8 = on_float;
  HostDevice device(options);
  auto packed = device.pack_int8_weight(w.data(), k, n);
  ASSERT_TRUE(packed.is_ok()) << packed.status().to_string();
  std::vector<int32_t> c(m * n, -1), loop(m * n, -1);
  Status status = device.gemm_int8(a.data(), type, m, *packed.value(), c.data(), {});
  ASSERT_TRUE(status.is_ok()) << status.to_string();
  int8_gemm_loop(a.data(), type, m, k, w.data(), n, loop.data());
  const auto expected = brute_force(a, w, m, k, n);
  EXPECT_EQ(c, expected) << "device m=" << m << " k=" << k << " n=" << n;
  EXPECT_EQ(loop, expected) << "loop m=" << m << " k=" << k << " n=" << n;
}

TEST(HostDevice, Int8GemmIsExactForSignedActivations) {
  for (int64_t m : {1, 5, 16, 37}) check_int8<int8_t>(ElementType::kInt8, m, 96, 48);
}

TEST(HostDevice, Int8GemmIsExactForUnsignedActivations) {
  for (int64_t m : {1, 3, 32}) check_int8<uint8_t>(ElementType::kUInt8, m, 128, 40);
}

// The float32 path that keeps int8 exact where oneDNN's int8 kernels saturate int16 pair sums
// (CPUs without VNNI). It runs there by itself; forced here so every CPU tests it. K past 1024
// is cut into chunks (equal ones: 2500 gives 833, 833, 834), summed in int32.
TEST(HostDevice, FloatInt8GemmIsExactForBothActivationTypes) {
  for (int64_t m : {1, 5, 130}) check_int8<int8_t>(ElementType::kInt8, m, 96, 300, true);
  for (int64_t m : {2, 33}) check_int8<uint8_t>(ElementType::kUInt8, m, 128, 40, true);
  for (int64_t m : {3, 129}) check_int8<uint8_t>(ElementType::kUInt8, m, 2500, 260, true);
  check_int8<int8_t>(ElementType::kInt8, 7, 1025, 33, true);
}

// Every product at its largest, every sum at its largest: what vpmaddubsw clips to -32768 per
// pair, and, over K = 3072, past float32's 2^24 unless K is chunked.
TEST(HostDevice, Int8GemmIsExactAtSaturatingValues) {
  for (bool on_float : {false, true}) {
    for (int64_t k : {1024, 3072}) {
      const int64_t m = 8, n = 48;
      DeviceOptions options;
      options.float_int8 = on_float;
      HostDevice device(options);
      std::vector<int8_t> w(k * n, -128);
      auto packed = device.pack_int8_weight(w.data(), k, n);
      ASSERT_TRUE(packed.is_ok());
      std::vector<uint8_t> a(m * k, 255);
      std::vector<int32_t> c(m * n);
      ASSERT_TRUE(device.gemm_int8(a.data(), ElementType::kUInt8, m, *packed.value(), c.data(), {})
                      .is_ok());
      for (int32_t v : c) ASSERT_EQ(v, k * 255 * -128) << "float=" << on_float << " k=" << k;
      std::vector<int8_t> s(m * k, -128);
      ASSERT_TRUE(
          device.gemm_int8(s.data(), ElementType::kInt8, m, *packed.value(), c.data(), {}).is_ok());
      for (int32_t v : c) ASSERT_EQ(v, k * 16384) << "float=" << on_float << " k=" << k;
    }
  }
}

// Sums far past 2^24 whose low bits matter: a float32 GEMM over all of K = 3072 would round
// them; each chunk of at most 1024 stays exact.
TEST(HostDevice, FloatInt8GemmChunksSumsPastTwoToThe24) {
  const int64_t m = 4, k = 3072, n = 40;
  std::vector<int8_t> w(k * n);
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < n; ++j)
      w[i * n + j] = static_cast<int8_t>((i * 7 + j) % 5 ? -128 : -127);
  std::vector<uint8_t> a(m * k);
  std::vector<int8_t> s(m * k);
  for (int64_t i = 0; i < m * k; ++i) {
    a[i] = static_cast<uint8_t>(255 - i % 2);
    s[i] = static_cast<int8_t>(-128 + i % 3);
  }
  DeviceOptions options;
  options.float_int8 = true;
  HostDevice device(options);
  auto packed = device.pack_int8_weight(w.data(), k, n);
  ASSERT_TRUE(packed.is_ok());
  auto not_a_float = [](const std::vector<int32_t>& values) {
    return std::count_if(values.begin(), values.end(), [](int32_t v) {
      return static_cast<int64_t>(static_cast<float>(v)) != v;
    });
  };
  std::vector<int32_t> c(m * n);
  ASSERT_TRUE(
      device.gemm_int8(a.data(), ElementType::kUInt8, m, *packed.value(), c.data(), {}).is_ok());
  const auto unsigned_expected = brute_force(a, w, m, k, n);
  EXPECT_EQ(c, unsigned_expected);
  ASSERT_TRUE(
      device.gemm_int8(s.data(), ElementType::kInt8, m, *packed.value(), c.data(), {}).is_ok());
  const auto signed_expected = brute_force(s, w, m, k, n);
  EXPECT_EQ(c, signed_expected);
  // The case is one a float32 result could not hold.
  EXPECT_GT(not_a_float(unsigned_expected), m * n / 2);
  EXPECT_GT(not_a_float(signed_expected), m * n / 2);
}

// Every activation `a_value`, every weight `w_value`: each output is K * a_value * w_value.
void check_constant_int8_gemm(int8_t a_value, int8_t w_value, int64_t m, int64_t k, int64_t n) {
  std::vector<int8_t> a(m * k, a_value), w(k * n, w_value);
  HostDevice device({});
  auto packed = device.pack_int8_weight(w.data(), k, n);
  ASSERT_TRUE(packed.is_ok());
  std::vector<int32_t> c(m * n);
  ASSERT_TRUE(
      device.gemm_int8(a.data(), ElementType::kInt8, m, *packed.value(), c.data(), {}).is_ok());
  const int64_t expected = k * a_value * w_value;
  for (int32_t v : c) ASSERT_EQ(v, expected);
}

TEST(HostDevice, Int8GemmIsExactAtExtremeValues) {
  // All -128 x -128 at K=3072 sums to 50331648: within int32, and exact.
  check_constant_int8_gemm(-128, -128, 16, 3072, 32);
}

TEST(HostDevice, SignedActivationsRunTheUnsignedActivationsKernel) {
  // int8 activations are shifted to uint8 on the layout packed for uint8; on that layout oneDNN
  // has no fast kernel for an s8 source on AVX-512 VNNI without AMX (it took its reference loop).
  const int64_t k = 1024, n = 512;
  std::vector<int8_t> w(k * n);
  std::mt19937 rng(11);
  for (auto& v : w) v = static_cast<int8_t>(rng());
  HostDevice device({});
  auto packed = device.pack_int8_weight(w.data(), k, n);
  ASSERT_TRUE(packed.is_ok());
  const std::string unsigned_kernel = device.int8_kernel(ElementType::kUInt8, *packed.value());
  EXPECT_EQ(device.int8_kernel(ElementType::kInt8, *packed.value()), unsigned_kernel);
  EXPECT_NE(unsigned_kernel.rfind("none", 0), 0u) << unsigned_kernel;
}

TEST(HostDevice, Int8GemmIsExactWhereTheShiftedSumWrapsInt32) {
  // 127 x 127 at K=70000 is 1129030000, within int32; shifted to uint8 it is (127 + 128) x 127
  // summed, 2266950000, past int32: the correction must undo the wrap exactly.
  check_constant_int8_gemm(127, 127, 4, 70000, 16);
}

TEST(HostDevice, FloatGemmMatchesReference) {
  const int64_t m = 7, k = 64, n = 24;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> a(m * k), w(k * n), c(m * n);
  for (auto& v : a) v = normal(rng);
  for (auto& v : w) v = normal(rng);
  HostDevice device({});
  auto packed = device.pack_float_weight(w.data(), k, n);
  ASSERT_TRUE(packed.is_ok());
  ASSERT_TRUE(device.gemm_float(a.data(), m, *packed.value(), c.data(), {}).is_ok());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0;
      for (int64_t kk = 0; kk < k; ++kk) ref += double(a[i * k + kk]) * w[kk * n + j];
      EXPECT_NEAR(c[i * n + j], ref, 1e-4 * (1 + std::abs(ref)));
    }
  }
}

TEST(HostDevice, RejectsMismatchedWeightTypes) {
  HostDevice device({});
  std::vector<float> w(4 * 4, 1.0f);
  auto packed = device.pack_float_weight(w.data(), 4, 4);
  ASSERT_TRUE(packed.is_ok());
  std::vector<int8_t> a(4);
  std::vector<int32_t> c(4);
  EXPECT_FALSE(
      device.gemm_int8(a.data(), ElementType::kInt8, 1, *packed.value(), c.data(), {}).is_ok());
}

TEST(HostDevice, Fp16GemmIsTheFp32ReferenceRoundedOnce) {
  const int64_t m = 5, k = 96, n = 40;
  std::mt19937 rng(6);
  std::normal_distribution<float> normal;
  std::vector<uint16_t> a(m * k), w(k * n);
  for (auto& v : a) v = float_to_half_bits(normal(rng));
  for (auto& v : w) v = float_to_half_bits(normal(rng));
  HostDevice device({});
  auto packed = device.pack_fp16_weight(w.data(), k, n);
  ASSERT_TRUE(packed.is_ok());
  std::vector<float> c32(m * n);
  std::vector<uint16_t> c16(m * n);
  ASSERT_TRUE(device.gemm_fp16(a.data(), m, *packed.value(), c32.data(), ElementType::kFloat32, {})
                  .is_ok());
  ASSERT_TRUE(device.gemm_fp16(a.data(), m, *packed.value(), c16.data(), ElementType::kFloat16, {})
                  .is_ok());
  for (int64_t i = 0; i < m * n; ++i) {
    double ref = 0;
    for (int64_t kk = 0; kk < k; ++kk) {
      ref +=
          double(half_bits_to_float(a[(i / n) * k + kk])) * half_bits_to_float(w[kk * n + i % n]);
    }
    EXPECT_NEAR(c32[i], ref, 1e-5 * (1 + std::abs(ref)));
    EXPECT_EQ(c16[i], float_to_half_bits(c32[i]));
  }
  EXPECT_FALSE(
      device.gemm_fp16(a.data(), m, *packed.value(), c32.data(), ElementType::kInt32, {}).is_ok());
}

TEST(HostDevice, Int4AndGroupwiseAreExactReferences) {
  const int64_t m = 3, k = 256, n = 24, group = 64, groups = k / group;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> i4(-7, 7);
  std::uniform_real_distribution<float> scale(0.001f, 0.1f);
  std::vector<int8_t> a(m * k), w(k * n);
  for (auto& v : a) v = static_cast<int8_t>(i4(rng));
  for (auto& v : w) v = static_cast<int8_t>(i4(rng));
  HostDevice device({});
  auto packed = device.pack_int4_weight(w.data(), k, n);
  ASSERT_TRUE(packed.is_ok());
  std::vector<int32_t> c(m * n);
  ASSERT_TRUE(device.gemm_int4(a.data(), m, *packed.value(), c.data(), {}).is_ok());
  EXPECT_EQ(c, brute_force(a, w, m, k, n));
  std::vector<float> as(m * groups), ws(n * groups), cg(m * n);
  for (auto& v : as) v = scale(rng);
  for (auto& v : ws) v = scale(rng);
  auto grouped = device.pack_groupwise_weight(w.data(), k, n, ElementType::kInt8, group);
  ASSERT_TRUE(grouped.is_ok());
  ASSERT_TRUE(
      device.gemm_groupwise(a.data(), as.data(), m, *grouped.value(), ws.data(), cg.data(), {})
          .is_ok());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float ref = 0.0f;
      for (int64_t g = 0; g < groups; ++g) {
        int32_t partial = 0;
        for (int64_t kk = g * group; kk < (g + 1) * group; ++kk)
          partial += a[i * k + kk] * w[kk * n + j];
        ref = ref + (as[i * groups + g] * ws[j * groups + g]) * static_cast<float>(partial);
      }
      EXPECT_EQ(cg[i * n + j], ref);
    }
  }
  w[0] = 8;
  EXPECT_FALSE(device.pack_int4_weight(w.data(), k, n).is_ok());
  EXPECT_FALSE(device.pack_groupwise_weight(w.data(), k, n, ElementType::kInt8, 100).is_ok());
}

TEST(HostDevice, BlockSinkCoversEveryRowPanelAndColumnBlockOnce) {
  // 300 rows x 600 columns spans three row panels and three column blocks, the last ones ragged.
  const int64_t m = 300, k = 64, n = 600;
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> i8(-128, 127);
  std::vector<int8_t> a(m * k), w(k * n);
  for (auto& v : a) v = static_cast<int8_t>(i8(rng));
  for (auto& v : w) v = static_cast<int8_t>(i8(rng));
  HostDevice device({});
  auto packed = device.pack_int8_weight(w.data(), k, n);
  ASSERT_TRUE(packed.is_ok());
  std::vector<int32_t> c(m * n, 0);
  std::vector<int> visits(m * n, 0);
  std::mutex mutex;
  Status status = device.gemm_int8_blocks(
      a.data(), ElementType::kInt8, m, *packed.value(),
      [&](int64_t row, int64_t col, int64_t rows, int64_t cols, const int32_t* data, int64_t ld) {
        std::lock_guard<std::mutex> lock(mutex);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < cols; ++j) {
            c[(row + r) * n + col + j] = data[r * ld + j];
            visits[(row + r) * n + col + j]++;
          }
      },
      two_threads());
  ASSERT_TRUE(status.is_ok()) << status.to_string();
  EXPECT_EQ(c, brute_force(a, w, m, k, n));
  EXPECT_EQ(std::count(visits.begin(), visits.end(), 1), m * n);
}

// oneDNN's library-managed scratchpad is per primitive unless the library was built for
// concurrent execution: tasks of one column block in different row panels must not share it.
TEST(HostDevice, ConcurrentRowPanelsOfOneBlockStayExact) {
  const int64_t m = 1024, k = 576, n = 256;  // eight row panels of one column block
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> i8(-128, 127);
  std::vector<int8_t> a(m * k), w(k * n);
  for (auto& v : a) v = static_cast<int8_t>(i8(rng));
  for (auto& v : w) v = static_cast<int8_t>(i8(rng));
  HostDevice device({});
  auto packed = device.pack_int8_weight(w.data(), k, n);
  ASSERT_TRUE(packed.is_ok());
  const auto expected = brute_force(a, w, m, k, n);
  for (int repeat = 0; repeat < 4; ++repeat) {
    std::vector<int32_t> c(m * n, 0);
    ASSERT_TRUE(
        device.gemm_int8(a.data(), ElementType::kInt8, m, *packed.value(), c.data(), two_threads())
            .is_ok());
    ASSERT_EQ(c, expected) << "repeat " << repeat;
  }
}

TEST(HostDevice, ConcurrentRowPanelsOfOneFloatBlockMatchTheReference) {
  const int64_t m = 1024, k = 576, n = 256;
  std::mt19937 rng(4);
  std::normal_distribution<float> normal;
  std::vector<float> a(m * k), w(k * n);
  for (auto& v : a) v = normal(rng);
  for (auto& v : w) v = normal(rng);
  HostDevice device({});
  auto packed = device.pack_float_weight(w.data(), k, n);
  ASSERT_TRUE(packed.is_ok());
  std::vector<float> serial(m * n), parallel(m * n);
  ASSERT_TRUE(device.gemm_float(a.data(), m, *packed.value(), serial.data(), {}).is_ok());
  for (int repeat = 0; repeat < 4; ++repeat) {
    ASSERT_TRUE(
        device.gemm_float(a.data(), m, *packed.value(), parallel.data(), two_threads()).is_ok());
    for (int64_t i = 0; i < m * n; ++i) {
      ASSERT_NEAR(parallel[i], serial[i], 1e-3f * (1.0f + std::abs(serial[i]))) << i;
    }
  }
}

// npuflow runs inside other people's processes: a GEMM must leave the OpenMP state of every
// thread it borrowed (the caller's included) as it found it, with a lent pool and without one.
TEST(HostDevice, LeavesTheCallersOpenMpThreadCountAsFound) {
  const int64_t m = 300, k = 64, n = 600;  // several tasks, one of them on the calling thread
  std::vector<int8_t> a(m * k, 3), w(k * n, -2);
  std::vector<int32_t> c(m * n);
  for (int threads : {0, 2}) {
    HostDevice device(DeviceOptions{threads});
    auto packed = device.pack_int8_weight(w.data(), k, n);
    ASSERT_TRUE(packed.is_ok());
    for (const ExecContext& context : {ExecContext{}, two_threads()}) {
      omp_set_num_threads(3);
      ASSERT_TRUE(
          device.gemm_int8(a.data(), ElementType::kInt8, m, *packed.value(), c.data(), context)
              .is_ok());
      EXPECT_EQ(omp_get_max_threads(), 3)
          << "threads=" << threads << (context.has_pool() ? " with" : " without") << " a pool";
    }
  }
}

// A weight with no rows or no columns is refused with a status: oneDNN divides by these
// dimensions while it chooses a layout (SIGFPE at K = 0).
TEST(HostDevice, RefusesEmptyWeights) {
  HostDevice device({});
  const std::vector<int8_t> none;
  const std::vector<float> none_f;
  for (auto [k, n] : {std::pair<int64_t, int64_t>{0, 32}, {64, 0}}) {
    EXPECT_EQ(device.pack_int8_weight(none.data(), k, n).status().code(),
              StatusCode::kInvalidArgument)
        << k << "x" << n;
    EXPECT_EQ(device.pack_float_weight(none_f.data(), k, n).status().code(),
              StatusCode::kInvalidArgument)
        << k << "x" << n;
  }
}

}  // namespace
}  // namespace npuflow
