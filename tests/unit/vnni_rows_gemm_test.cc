// The host's few-rows int8 kernel (host/vnni_rows_gemm.h) against brute force over random
// shapes, values and row counts, on the weights oneDNN packs: forced on at every row count,
// forced off, and at the default cut-over, with int8 and uint8 activations, on a lent pool.
#include "host/vnni_rows_gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "device/int8_gemm_loop.h"
#include "host/host_device.h"
#include "host/onednn_weight.h"
#include "ops/simd.h"
#include "two_thread_pool.h"

namespace npuflow {
namespace {

// Log-uniform in [low, high].
int64_t log_uniform(std::mt19937& rng, int64_t low, int64_t high) {
  std::uniform_real_distribution<double> u(std::log(static_cast<double>(low)),
                                           std::log(static_cast<double>(high) + 1));
  return std::min<int64_t>(high, static_cast<int64_t>(std::exp(u(rng))));
}

// Values of one draw: uniform, the extremes only (largest products and sums), or mostly zero.
int draw_value(std::mt19937& rng, int mode, int low, int high) {
  std::uniform_int_distribution<int> any(low, high);
  if (mode == 1) return rng() % 2 ? low : high;
  if (mode == 2 && rng() % 4 != 0) return 0;
  return any(rng);
}

struct Case {
  int64_t m, k, n;
  ElementType type;
  int mode;
};

std::string describe(const Case& c) {
  return "m=" + std::to_string(c.m) + " k=" + std::to_string(c.k) + " n=" + std::to_string(c.n) +
         (c.type == ElementType::kInt8 ? " int8" : " uint8") + " mode=" + std::to_string(c.mode);
}

TEST(VnniRowsGemm, EqualsTheLoopOnRandomShapesAtEveryCutOver) {
  std::mt19937 rng(20261206);
  HostDevice forced(DeviceOptions{.few_rows_max = 1 << 20});
  HostDevice onednn(DeviceOptions{.few_rows_max = 0});
  HostDevice by_default(DeviceOptions{});
  for (int trial = 0; trial < 400; ++trial) {
    Case c{log_uniform(rng, 1, 300), log_uniform(rng, 1, 2100), log_uniform(rng, 1, 700),
           rng() % 2 ? ElementType::kInt8 : ElementType::kUInt8, static_cast<int>(rng() % 3)};
    // Bounds the brute force: big M only with small K x N.
    while (c.m * c.k * c.n > 6'000'000) c.m = std::max<int64_t>(1, c.m / 2);
    const bool is_signed = c.type == ElementType::kInt8;
    std::vector<uint8_t> a(static_cast<size_t>(c.m * c.k));
    for (auto& v : a) {
      v = static_cast<uint8_t>(
          draw_value(rng, c.mode, is_signed ? -128 : 0, is_signed ? 127 : 255));
    }
    std::vector<int8_t> w(static_cast<size_t>(c.k * c.n));
    for (auto& v : w) v = static_cast<int8_t>(draw_value(rng, c.mode, -128, 127));
    std::vector<int32_t> expected(static_cast<size_t>(c.m * c.n));
    int8_gemm_loop(a.data(), c.type, c.m, c.k, w.data(), c.n, expected.data());
    for (HostDevice* device : {&forced, &onednn, &by_default}) {
      // A weight runs on the device that packed it (its oneDNN engine).
      auto packed = device->pack_int8_weight(w.data(), c.k, c.n);
      ASSERT_TRUE(packed.is_ok()) << describe(c);
      std::vector<int32_t> out(expected.size(), -7);
      const Status status =
          device->gemm_int8(a.data(), c.type, c.m, *packed.value(), out.data(), two_threads());
      const char* arm = device == &forced ? "all" : device == &onednn ? "0" : "default";
      ASSERT_TRUE(status.is_ok()) << describe(c) << " few_rows_max=" << arm << ": "
                                  << status.to_string();
      ASSERT_EQ(out, expected) << describe(c) << " few_rows_max=" << arm;
    }
  }
}

// Where the kernel runs, oneDNN's int8 weight is in the layout it reads, so the forced arm above
// did run it; where it does not, the layout may differ and only oneDNN's kernel runs.
TEST(VnniRowsGemm, OneDnnPacksTheLayoutTheKernelReads) {
  if (!host_onednn::vnni_rows_kernel_runs()) {
    GTEST_SKIP() << "no AVX-512 VNNI here: the few-rows kernel is not used";
  }
  HostDevice device({});
  for (auto [k, n] : {std::pair<int64_t, int64_t>{1, 1}, {17, 300}, {1024, 2048}, {3000, 65}}) {
    std::vector<int8_t> w(static_cast<size_t>(k * n), 3);
    auto packed = device.pack_int8_weight(w.data(), k, n);
    ASSERT_TRUE(packed.is_ok());
    const auto* weight = dynamic_cast<const host_onednn::OneDnnWeight*>(packed.value().get());
    ASSERT_NE(weight, nullptr);
    for (const auto& block : weight->blocks()) {
      const host_onednn::VnniTiles& tiles = block.vnni_tiles();
      EXPECT_NE(tiles.data, nullptr) << "k=" << k << " n=" << n;
      EXPECT_EQ(tiles.padded_k % 64, 0);
      EXPECT_GE(tiles.padded_k, k);
      EXPECT_EQ(tiles.tile_stride, tiles.padded_k * 64);
    }
  }
}

// The plain loops (CPUs without VNNI, portable kernels) read the layout as the vector kernel does.
TEST(VnniRowsGemm, PlainLoopsEqualTheVectorKernel) {
  if (!host_onednn::vnni_rows_kernel_runs()) {
    GTEST_SKIP() << "no AVX-512 VNNI here: the vector kernel does not run";
  }
  const int64_t k = 300, n = 200, m = 7;
  std::mt19937 rng(5);
  std::vector<int8_t> w(static_cast<size_t>(k * n));
  for (auto& v : w) v = static_cast<int8_t>(rng());
  HostDevice device({});
  auto packed = device.pack_int8_weight(w.data(), k, n);
  ASSERT_TRUE(packed.is_ok());
  const auto& block =
      dynamic_cast<const host_onednn::OneDnnWeight&>(*packed.value()).blocks().front();
  const host_onednn::VnniTiles& tiles = block.vnni_tiles();
  std::vector<uint8_t> a(static_cast<size_t>(m * tiles.padded_k), 0);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t i = 0; i < k; ++i) a[r * tiles.padded_k + i] = static_cast<uint8_t>(rng());
  }
  std::vector<int32_t> vector(static_cast<size_t>(m * n)), plain(vector.size());
  host_onednn::vnni_rows_gemm(a.data(), m, tiles.padded_k, tiles, vector.data(), n);
  {
    ScopedPortableKernels portable(true);
    ASSERT_FALSE(host_onednn::vnni_rows_kernel_runs());
    host_onednn::vnni_rows_gemm(a.data(), m, tiles.padded_k, tiles, plain.data(), n);
  }
  EXPECT_EQ(plain, vector);
  std::vector<int32_t> expected(vector.size());
  std::vector<uint8_t> dense(static_cast<size_t>(m * k));
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t i = 0; i < k; ++i) dense[r * k + i] = a[r * tiles.padded_k + i];
  }
  int8_gemm_loop(dense.data(), ElementType::kUInt8, m, k, w.data(), n, expected.data());
  EXPECT_EQ(vector, expected);
}

}  // namespace
}  // namespace npuflow
