// The simulator's contract: the library's shape refusals, its tiling planner against the
// published Kt figures, the worker split, and what a caller sees through QdqMatMul when the sim
// pads rows, runs out of IOVA or fails a submit (the same exact output every time).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/fp16.h"
#include "host/host_device.h"
#include "quant/qdq_matmul.h"
#include "sim/rk3588_contract.h"
#include "sim/sim_device.h"

namespace npuflow::sim {
namespace {

void expect_refused(const Status& status, const std::string& message) {
  EXPECT_EQ(status.code(), StatusCode::kUnsupported) << status.to_string();
  EXPECT_EQ(status.message(), message);
}

TEST(SimContract, MisalignedShapesAreRefusedInTheLibrarysTerms) {
  EXPECT_TRUE(check_shape(NpuType::kInt8, 4, 64, 64).is_ok());
  expect_refused(check_shape(NpuType::kInt8, 4, 64, 40),
                 "ROCKET_E_SHAPE: int8 N=40 is not a multiple of 32");
  expect_refused(check_shape(NpuType::kFp16, 4, 48, 16),
                 "ROCKET_E_SHAPE: fp16 K=48 is not a multiple of 32");
  EXPECT_TRUE(check_shape(NpuType::kFp16, 4, 32, 48).is_ok());  // fp16 needs only N % 16
  expect_refused(check_shape(NpuType::kInt4, 8, 32, 96),
                 "ROCKET_E_SHAPE: int4 N=96 is not a multiple of 64");
  expect_refused(check_shape(NpuType::kInt8, 6, 32, 32),
                 "ROCKET_E_SHAPE: int8 M=6 is not a multiple of 4 (planners refuse ragged M; "
                 "zero-pad the rows)");
  expect_refused(
      check_shape(NpuType::kFp16, 1, 32, 16),
      "ROCKET_E_SHAPE: fp16 M=1: the hardware is wrong below 4 rows and planners refuse it (pad "
      "to 4)");
  expect_refused(check_shape(NpuType::kInt8, 0, 32, 32),
                 "ROCKET_E_SHAPE: int8 M=0 must be positive");
  expect_refused(check_shape(NpuType::kInt8, 4, (int64_t{1} << 24) + 32, 32),
                 "ROCKET_E_SHAPE: int8 K=16777248 exceeds 2^24");
  EXPECT_TRUE(check_group(NpuType::kInt8, 512, 128).is_ok());
  EXPECT_FALSE(check_group(NpuType::kInt8, 512, 48).is_ok());
  EXPECT_FALSE(check_group(NpuType::kInt8, 480, 128).is_ok());
  EXPECT_FALSE(check_group(NpuType::kInt4, 1344, 672).is_ok());  // 49 * 672 > 32767
}

TEST(SimContract, PlannerReproducesThePublishedKtAt256x256) {
  // rk3588-npu.md §1 Tile caps: Kt at Mt = Nt = 256 is fp16 384 (512 with ASYM, Nt 128), int8
  // 640, int4 1536.
  PlanOptions no_asym;
  no_asym.asym = false;
  auto fp16 = plan_tiles(NpuType::kFp16, 256, 4096, 256, no_asym);
  ASSERT_TRUE(fp16.is_ok());
  EXPECT_EQ(fp16.value().kt, 384);
  EXPECT_EQ(fp16.value().feature_banks + fp16.value().weight_banks, 12);
  auto asym = plan_tiles(NpuType::kFp16, 256, 4096, 512);
  ASSERT_TRUE(asym.is_ok());
  EXPECT_TRUE(asym.value().asym);
  EXPECT_EQ(asym.value().kt, 512);
  EXPECT_EQ(asym.value().nt, 128);
  EXPECT_EQ(plan_tiles(NpuType::kInt8, 256, 4096, 256).value().kt, 640);
  EXPECT_EQ(plan_tiles(NpuType::kInt4, 256, 4096, 256).value().kt, 1536);
  // ASYM needs N > 256 and several K tiles.
  EXPECT_FALSE(plan_tiles(NpuType::kFp16, 256, 4096, 256).value().asym);
  EXPECT_FALSE(plan_tiles(NpuType::kFp16, 256, 384, 512).value().asym);
  // Kt never exceeds K or 16384, and M, N tiles cap at 256.
  const TilePlan small = plan_tiles(NpuType::kInt8, 4, 96, 32).value();
  EXPECT_EQ(small.kt, 96);
  EXPECT_EQ(small.tiles(), 1);
  const TilePlan big = plan_tiles(NpuType::kInt8, 1000, 20000, 1024).value();
  EXPECT_EQ(big.mt, 256);
  EXPECT_EQ(big.m_tiles, 4);
  EXPECT_EQ(big.n_tiles, 4);
  EXPECT_LE(big.kt, 16384);
  EXPECT_LE(big.feature_banks + big.weight_banks, 11);  // int8 keeps a slack bank
  // Group-wise: Kt divides the group; int4 kt_cap bounds Kt.
  PlanOptions grouped;
  grouped.group = 96;
  EXPECT_EQ(96 % plan_tiles(NpuType::kInt8, 256, 960, 64, grouped).value().kt, 0);
  PlanOptions capped;
  capped.kt_cap = 480;
  EXPECT_EQ(plan_tiles(NpuType::kInt4, 256, 4096, 256, capped).value().kt, 480);
}

TEST(SimContract, WorkersSplitNInSlicesRoundedUpTo16) {
  EXPECT_EQ(worker_slice_width(NpuType::kFp16, 4096, 5), 832);  // ceil(819.2) -> 832
  EXPECT_EQ(worker_slice_width(NpuType::kFp16, 600, 8), 80);    // 75 -> 80
  EXPECT_EQ(worker_slice_width(NpuType::kInt8, 96, 5), 32);     // int8 keeps N % 32 per slice
  auto slices = plan_workers(NpuType::kFp16, 256, 1024, 4096, 5);
  ASSERT_TRUE(slices.is_ok());
  ASSERT_EQ(slices.value().size(), 5u);
  EXPECT_EQ(slices.value()[4].n0, 4 * 832);
  EXPECT_EQ(slices.value()[4].n, 4096 - 4 * 832);
  // Too few columns for every worker: empty slices are dropped.
  EXPECT_EQ(plan_workers(NpuType::kInt8, 4, 32, 64, 5).value().size(), 2u);
  EXPECT_FALSE(plan_workers(NpuType::kInt8, 4, 32, 64, 9).is_ok());
}

std::vector<int8_t> random_int8(size_t count, uint32_t seed, int lo = -128, int hi = 127) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<int8_t> v(count);
  for (auto& x : v) x = static_cast<int8_t>(dist(rng));
  return v;
}

TEST(SimDevice, RefusesRaggedRowsAndUnpaddedWeightsWhenAskedTo) {
  SimDevice sim;
  const auto w = random_int8(64 * 40, 1);
  auto packed = sim.pack_int8_weight(w.data(), 64, 40);  // N padded to 64 internally
  ASSERT_TRUE(packed.is_ok()) << packed.status().to_string();
  EXPECT_EQ(sim.row_multiple(ElementType::kInt8), 4);
  const auto a = random_int8(6 * 64, 2);
  std::vector<int32_t> c(6 * 40);
  Status status = sim.gemm_int8(a.data(), ElementType::kInt8, 6, *packed.value(), c.data(), {});
  EXPECT_EQ(status.code(), StatusCode::kUnsupported);
  EXPECT_NE(status.message().find("ROCKET_E_SHAPE: int8 M=6"), std::string::npos);
  EXPECT_EQ(sim.profile().refused, 1);
  EXPECT_EQ(sim.profile().calls, 0);

  SimOptions strict;
  strict.pad_weights = false;
  SimDevice bare(strict);
  auto refused = bare.pack_int8_weight(w.data(), 64, 40);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().message(), "ROCKET_E_SHAPE: int8 N=40 is not a multiple of 32");
  EXPECT_EQ(bare.pack_float_weight(nullptr, 32, 32).status().code(), StatusCode::kUnsupported);
}

TEST(SimDevice, IovaBudgetIsChargedPerFdAndReleased) {
  SimOptions options;
  options.workers = 2;
  options.iova_bytes_per_fd = 64 * 1024;
  SimDevice sim(options);
  const auto w = random_int8(256 * 256, 3);
  auto first = sim.pack_int8_weight(w.data(), 256, 256);  // 32 KiB per fd
  ASSERT_TRUE(first.is_ok());
  EXPECT_EQ(sim.iova_in_use(0), 32u * 1024);
  EXPECT_EQ(sim.iova_in_use(1), 32u * 1024);
  auto second = sim.pack_int8_weight(w.data(), 256, 256);
  ASSERT_TRUE(second.is_ok());
  auto third = sim.pack_int8_weight(w.data(), 256, 256);
  ASSERT_FALSE(third.is_ok());
  EXPECT_EQ(third.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(third.status().message().find("ROCKET_E_NOMEM"), std::string::npos);
  second.value().reset();
  EXPECT_EQ(sim.iova_in_use(1), 32u * 1024);
  EXPECT_TRUE(sim.pack_int8_weight(w.data(), 256, 256).is_ok());
}

QdqGemmSpec spec_for(int64_t k, int64_t n) {
  QdqGemmSpec spec;
  spec.k = k;
  spec.n = n;
  spec.x_scale = 0.02f;
  spec.x_zero_point = 3;
  spec.w_scales.assign(n, 0.0f);
  spec.w_zero_points.assign(n, 0);
  for (int64_t j = 0; j < n; ++j) {
    spec.w_scales[j] = 0.0005f * static_cast<float>(j % 13 + 1);
    spec.w_zero_points[j] = static_cast<int32_t>(j % 5) - 2;
  }
  spec.output = QuantizedOutput{0.4f, 1, ElementType::kInt8};
  return spec;
}

struct QdqCase {
  int64_t k = 200, n = 72;  // both outside the int8 contract: the sim pads them
  std::vector<int8_t> w = random_int8(200 * 72, 11);
  Logger quiet{LogLevel::kError, [](LogLevel, const std::string&) {}};

  std::vector<int8_t> run(const std::shared_ptr<Device>& device, const std::vector<int8_t>& a,
                          int64_t m, const QdqMatMul** keep = nullptr,
                          std::unique_ptr<QdqMatMul>* owner = nullptr, int calls = 1) {
    auto kernel =
        QdqMatMul::create("t", spec_for(k, n), w.data(), ElementType::kInt8, device, 1, quiet);
    EXPECT_TRUE(kernel.is_ok()) << kernel.status().to_string();
    std::vector<int8_t> y(static_cast<size_t>(m * n));
    for (int i = 0; i < calls; ++i) {
      std::fill(y.begin(), y.end(), int8_t{99});
      EXPECT_TRUE(kernel.value()->run(a.data(), ElementType::kInt8, m, y.data(), {}).is_ok());
    }
    if (keep) *keep = kernel.value().get();
    if (owner) *owner = std::move(kernel).value();
    return y;
  }
};

TEST(SimQdq, RaggedRowsArePaddedNotRefusedAndMatchHostExactly) {
  QdqCase t;
  auto host = std::make_shared<HostDevice>(DeviceOptions{});
  auto sim = std::make_shared<SimDevice>();
  for (int64_t m : {1, 2, 3, 4, 5, 13, 37}) {
    const auto a = random_int8(static_cast<size_t>(m * t.k), static_cast<uint32_t>(m));
    const QdqMatMul* kernel = nullptr;
    std::unique_ptr<QdqMatMul> owner;
    const auto on_sim = t.run(sim, a, m, &kernel, &owner);
    EXPECT_EQ(on_sim, t.run(host, a, m)) << "m=" << m;
    EXPECT_EQ(kernel->counters().device_calls.load(), 1) << "m=" << m;
    EXPECT_EQ(kernel->counters().fallback_calls.load(), 0) << "m=" << m;
    EXPECT_EQ(kernel->counters().padded_calls.load(), m % 4 ? 1 : 0) << "m=" << m;
  }
  EXPECT_EQ(sim->profile().refused, 0);
  EXPECT_EQ(sim->profile().calls, 7);
  EXPECT_GT(sim->profile().device_ms, 0.0);
}

TEST(SimQdq, IovaExhaustionFallsBackWithUnchangedOutput) {
  QdqCase t;
  const int64_t m = 8;
  const auto a = random_int8(static_cast<size_t>(m * t.k), 5);
  const auto expected = t.run(std::make_shared<HostDevice>(DeviceOptions{}), a, m);
  // No room for the weight: the kernel is created anyway and runs on the host loop.
  SimOptions tiny;
  tiny.iova_bytes_per_fd = 4096;
  auto full = std::make_shared<SimDevice>(tiny);
  const QdqMatMul* kernel = nullptr;
  std::unique_ptr<QdqMatMul> owner;
  EXPECT_EQ(t.run(full, a, m, &kernel, &owner, 2), expected);
  EXPECT_FALSE(kernel->on_device());
  EXPECT_EQ(kernel->counters().fallback_calls.load(), 2);
  EXPECT_EQ(full->profile().calls, 0);
  // Room for the weight (224 x 32 int8 per fd, 8 KiB page-rounded) but not for a call's two
  // buffers (a page each).
  SimOptions tight;
  tight.iova_bytes_per_fd = 12 * 1024;
  auto crowded = std::make_shared<SimDevice>(tight);
  EXPECT_EQ(t.run(crowded, a, m, &kernel, &owner, 2), expected);
  EXPECT_TRUE(kernel->on_device());
  EXPECT_EQ(kernel->counters().fallback_calls.load(), 2);
  EXPECT_EQ(crowded->profile().refused, 2);
}

TEST(SimQdq, InjectedSubmitFailuresFallBackWithUnchangedOutput) {
  QdqCase t;
  const int64_t m = 12;
  const auto a = random_int8(static_cast<size_t>(m * t.k), 6);
  const auto expected = t.run(std::make_shared<HostDevice>(DeviceOptions{}), a, m);
  std::vector<std::string> warnings;
  Logger logger(LogLevel::kWarning, [&](LogLevel, const std::string& s) { warnings.push_back(s); });
  SimOptions options;
  options.fail_every = 2;
  auto sim = std::make_shared<SimDevice>(options);
  auto kernel =
      QdqMatMul::create("t", spec_for(t.k, t.n), t.w.data(), ElementType::kInt8, sim, 1, logger);
  ASSERT_TRUE(kernel.is_ok());
  for (int call = 0; call < 5; ++call) {
    std::vector<int8_t> y(static_cast<size_t>(m * t.n), 99);
    ASSERT_TRUE(kernel.value()->run(a.data(), ElementType::kInt8, m, y.data(), {}).is_ok());
    EXPECT_EQ(y, expected) << "call " << call;
  }
  EXPECT_EQ(kernel.value()->counters().fallback_calls.load(), 2);  // calls 2 and 4
  EXPECT_EQ(kernel.value()->counters().device_calls.load(), 3);
  EXPECT_EQ(sim->profile().failed, 2);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("ROCKET_E_DEVICE: injected submit failure"), std::string::npos);
}

TEST(SimQdq, AFailedSubmitLeavesGarbageThatTheFallbackOverwrites) {
  SimOptions options;
  options.fail_every = 1;
  SimDevice sim(options);
  const auto w = random_int8(64 * 32, 8);
  auto packed = sim.pack_int8_weight(w.data(), 64, 32);
  ASSERT_TRUE(packed.is_ok());
  const auto a = random_int8(4 * 64, 9);
  std::vector<int32_t> c(4 * 32, 0);
  Status status = sim.gemm_int8(a.data(), ElementType::kInt8, 4, *packed.value(), c.data(), {});
  EXPECT_EQ(status.code(), StatusCode::kDeviceFailure);
  EXPECT_EQ(c[0], 0x5a5a5a5a);
}

TEST(SimQdq, CorruptedCallsSucceedWithTheirFirstElementFarOff) {
  SimOptions options;
  options.corrupt_every = 2;
  SimDevice sim(options);
  HostDevice host{DeviceOptions{}};
  const auto w = random_int8(64 * 32, 10);
  auto packed = sim.pack_int8_weight(w.data(), 64, 32);
  auto reference = host.pack_int8_weight(w.data(), 64, 32);
  ASSERT_TRUE(packed.is_ok() && reference.is_ok());
  const auto a = random_int8(4 * 64, 11);
  std::vector<int32_t> expected(4 * 32);
  ASSERT_TRUE(
      host.gemm_int8(a.data(), ElementType::kInt8, 4, *reference.value(), expected.data(), {})
          .is_ok());
  for (int call = 1; call <= 4; ++call) {
    std::vector<int32_t> c(4 * 32, 0);
    ASSERT_TRUE(
        sim.gemm_int8(a.data(), ElementType::kInt8, 4, *packed.value(), c.data(), {}).is_ok());
    const bool corrupt = call % 2 == 0;
    EXPECT_EQ(std::abs(int64_t{c[0]} - expected[0]) >= (1 << 27), corrupt) << "call " << call;
    EXPECT_TRUE(std::equal(c.begin() + 1, c.end(), expected.begin() + 1)) << "call " << call;
  }
  EXPECT_EQ(sim.profile().corrupted, 2);
  EXPECT_EQ(sim.profile().failed, 0);
  EXPECT_NE(sim.profile_report().find("corrupted 2 call outputs"), std::string::npos);
}

TEST(SimFp16, CorruptedCallsMoveTheirFirstElementFarOff) {
  SimOptions options;
  options.corrupt_every = 1;
  SimDevice sim(options);
  SimDevice clean;
  std::vector<uint16_t> w(64 * 32), a(256 * 64);
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = float_to_half_bits(0.01f * static_cast<float>(i % 13));
  for (size_t i = 0; i < a.size(); ++i) a[i] = float_to_half_bits(0.1f * static_cast<float>(i % 5));
  auto packed = sim.pack_fp16_weight(w.data(), 64, 32);
  auto clean_packed = clean.pack_fp16_weight(w.data(), 64, 32);
  ASSERT_TRUE(packed.is_ok() && clean_packed.is_ok());
  std::vector<float> got(256 * 32), expected(256 * 32);
  ASSERT_TRUE(
      sim.gemm_fp16(a.data(), 256, *packed.value(), got.data(), ElementType::kFloat32, {}).is_ok());
  ASSERT_TRUE(clean
                  .gemm_fp16(a.data(), 256, *clean_packed.value(), expected.data(),
                             ElementType::kFloat32, {})
                  .is_ok());
  EXPECT_GE(std::fabs(got[0] - expected[0]), 1024.0f);
  EXPECT_TRUE(std::equal(got.begin() + 1, got.end(), expected.begin() + 1));
}

}  // namespace
}  // namespace npuflow::sim
