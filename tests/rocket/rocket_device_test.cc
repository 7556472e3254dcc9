// SPDX-License-Identifier: GPL-3.0-or-later
// The rocket device module driving librocketnpu-sim.so through librocketnpu's C API: the adapter
// code a board runs, checked off-board. int8 must equal the exact host result and fp16 the sim
// device's bit for bit (the same simulator, reached through the library boundary), at shapes the
// library takes only after the adapter's padding; refusals, injected failures, concurrent callers
// and weight lifetimes must behave as the adapter documents.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/fp16.h"
#include "device/device_module.h"
#include "host/host_device.h"
#include "random_operands.h"
#include "route/device_selection.h"
#include "sim/board_cpu_model.h"
#include "sim/sim_device.h"

namespace npuflow {
namespace {

using device_test::random_halves;
using device_test::random_ints;

std::unique_ptr<Device> rocket_on_sim() {
  DeviceConfig config;
  config.name = "rocket";
  config.rocket_module = NPUFLOW_ROCKET_MODULE;
  config.rocketnpu = NPUFLOW_ROCKETNPU_SIM;
  BoardProbe none;
  auto chosen = create_device(config, &none);
  EXPECT_TRUE(chosen.is_ok()) << chosen.status().to_string();
  if (!chosen.is_ok()) return nullptr;
  EXPECT_NE(chosen.value().reason.find(NPUFLOW_ROCKETNPU_SIM), std::string::npos);
  return std::move(chosen.value().device);
}

TEST(RocketDevice, IsCreatedThroughItsModuleOnTheSimLibrary) {
  auto device = rocket_on_sim();
  ASSERT_NE(device, nullptr);
  EXPECT_EQ(device->name(), "rocket");
  EXPECT_EQ(device->row_multiple(ElementType::kInt8), 4);
  EXPECT_EQ(device->float_compute_type(), ElementType::kFloat16);
}

TEST(RocketDevice, AMissingLibraryIsASessionErrorThatNamesIt) {
  DeviceConfig config;
  config.name = "rocket";
  config.rocket_module = NPUFLOW_ROCKET_MODULE;
  config.rocketnpu = "/nonexistent/librocketnpu.so.0";
  BoardProbe none;
  auto chosen = create_device(config, &none);
  ASSERT_FALSE(chosen.is_ok());
  EXPECT_NE(chosen.status().message().find("cannot open librocketnpu '/nonexistent"),
            std::string::npos)
      << chosen.status().message();
  // A library without the entry points (libc) is refused with the missing names.
  config.rocketnpu = "libc.so.6";
  auto lacking = create_device(config, &none);
  ASSERT_FALSE(lacking.is_ok());
  EXPECT_NE(lacking.status().message().find("lacks rocket_ctx_create"), std::string::npos);
}

TEST(RocketDevice, Int8GemmsAreExactAtUnalignedShapesBothActivationTypes) {
  auto device = rocket_on_sim();
  ASSERT_NE(device, nullptr);
  HostDevice host{DeviceOptions{}};
  uint32_t seed = 1;
  for (int64_t k : {32, 70, 300}) {
    for (int64_t n : {32, 50, 97}) {
      const auto w = random_ints<int8_t>(static_cast<size_t>(k * n), -128, 127, seed++);
      auto packed = device->pack_int8_weight(w.data(), k, n);
      ASSERT_TRUE(packed.is_ok()) << packed.status().to_string();
      auto reference = host.pack_int8_weight(w.data(), k, n);
      ASSERT_TRUE(reference.is_ok());
      for (int64_t m : {4, 12, 260}) {
        for (ElementType type : {ElementType::kInt8, ElementType::kUInt8}) {
          // Bytes: read as int8 or as uint8 by `type`.
          const auto a = random_ints<uint8_t>(static_cast<size_t>(m * k), 0, 255, seed++);
          std::vector<int32_t> got(static_cast<size_t>(m * n)), want(got.size());
          ASSERT_TRUE(
              device->gemm_int8(a.data(), type, m, *packed.value(), got.data(), {}).is_ok());
          ASSERT_TRUE(
              host.gemm_int8(a.data(), type, m, *reference.value(), want.data(), {}).is_ok());
          ASSERT_EQ(got, want) << "m=" << m << " k=" << k << " n=" << n
                               << (type == ElementType::kUInt8 ? " uint8" : " int8");
        }
      }
    }
  }
  EXPECT_NE(device->profile_report().find("rocket_matmul_int8_prepacked calls=54"),
            std::string::npos)
      << device->profile_report();
}

TEST(RocketDevice, Fp16GemmsMatchTheSimDeviceBitForBit) {
  auto device = rocket_on_sim();
  ASSERT_NE(device, nullptr);
  sim::SimDevice sim;  // the same simulator, called directly; it pads weights itself
  HostDevice host{DeviceOptions{}};
  uint32_t seed = 100;
  for (int64_t k : {64, 200, 1000}) {
    for (int64_t n : {16, 50, 200}) {
      const auto w = random_halves(static_cast<size_t>(k * n), seed++);
      auto packed = device->pack_fp16_weight(w.data(), k, n);
      ASSERT_TRUE(packed.is_ok()) << packed.status().to_string();
      auto sim_packed = sim.pack_fp16_weight(w.data(), k, n);
      ASSERT_TRUE(sim_packed.is_ok());
      auto host_packed = host.pack_fp16_weight(w.data(), k, n);
      ASSERT_TRUE(host_packed.is_ok());
      const int64_t m = 256;
      const auto a = random_halves(static_cast<size_t>(m * k), seed++);
      std::vector<uint16_t> got(static_cast<size_t>(m * n)), want(got.size());
      ASSERT_TRUE(
          device->gemm_fp16(a.data(), m, *packed.value(), got.data(), ElementType::kFloat16, {})
              .is_ok());
      ASSERT_TRUE(
          sim.gemm_fp16(a.data(), m, *sim_packed.value(), want.data(), ElementType::kFloat16, {})
              .is_ok());
      ASSERT_EQ(got, want) << "m=" << m << " k=" << k << " n=" << n;
      // fp32 results: the resident path's fp16, widened.
      std::vector<float> wide(got.size()), exact(got.size());
      ASSERT_TRUE(
          device->gemm_fp16(a.data(), m, *packed.value(), wide.data(), ElementType::kFloat32, {})
              .is_ok());
      ASSERT_TRUE(
          host.gemm_fp16(a.data(), m, *host_packed.value(), exact.data(), ElementType::kFloat32, {})
              .is_ok());
      double error = 0, norm = 0;
      for (size_t i = 0; i < wide.size(); ++i) {
        ASSERT_EQ(wide[i], half_bits_to_float(got[i]));
        error += (wide[i] - exact[i]) * (wide[i] - exact[i]);
        norm += exact[i] * exact[i];
      }
      EXPECT_LT(std::sqrt(error / norm), 2e-3) << "k=" << k << " n=" << n;
    }
  }
}

TEST(RocketDevice, Int4AndGroupwiseGoThroughTheirEntryPoints) {
  auto device = rocket_on_sim();
  ASSERT_NE(device, nullptr);
  HostDevice host{DeviceOptions{}};
  const int64_t k = 192, n = 40, m = 8, group = 64, groups = k / group;
  const auto w = random_ints<int8_t>(static_cast<size_t>(k * n), -7, 7, 21);
  const auto a = random_ints<int8_t>(static_cast<size_t>(m * k), -7, 7, 22);
  std::vector<float> a_scales(static_cast<size_t>(m * groups)), w_scales(n * groups);
  for (size_t i = 0; i < a_scales.size(); ++i)
    a_scales[i] = 0.5f + 0.125f * static_cast<float>(i % 5);
  for (size_t i = 0; i < w_scales.size(); ++i)
    w_scales[i] = 0.25f + 0.0625f * static_cast<float>(i % 3);
  auto int4 = device->pack_int4_weight(w.data(), k, n);
  auto host_int4 = host.pack_int4_weight(w.data(), k, n);
  ASSERT_TRUE(int4.is_ok() && host_int4.is_ok()) << int4.status().to_string();
  std::vector<int32_t> got(static_cast<size_t>(m * n)), want(got.size());
  ASSERT_TRUE(device->gemm_int4(a.data(), m, *int4.value(), got.data(), {}).is_ok());
  ASSERT_TRUE(host.gemm_int4(a.data(), m, *host_int4.value(), want.data(), {}).is_ok());
  EXPECT_EQ(got, want);
  for (ElementType type : {ElementType::kInt8, ElementType::kInt4}) {
    auto grouped = device->pack_groupwise_weight(w.data(), k, n, type, group);
    auto host_grouped = host.pack_groupwise_weight(w.data(), k, n, type, group);
    ASSERT_TRUE(grouped.is_ok() && host_grouped.is_ok()) << grouped.status().to_string();
    std::vector<float> c(static_cast<size_t>(m * n)), c_host(c.size());
    ASSERT_TRUE(device
                    ->gemm_groupwise(a.data(), a_scales.data(), m, *grouped.value(),
                                     w_scales.data(), c.data(), {})
                    .is_ok());
    ASSERT_TRUE(host.gemm_groupwise(a.data(), a_scales.data(), m, *host_grouped.value(),
                                    w_scales.data(), c_host.data(), {})
                    .is_ok());
    // Scales of few bits and small partials: every product and sum is exact in fp32.
    EXPECT_EQ(c, c_host);
  }
  const std::string report = device->profile_report();
  for (const char* entry :
       {"rocket_matmul_int4_prepacked calls=1", "rocket_i4_weights_pack_gw calls=1",
        "rocket_matmul_int4_prepacked_gw calls=1", "rocket_matmul_int8_prepacked_gw calls=1"}) {
    EXPECT_NE(report.find(entry), std::string::npos) << entry << " in\n" << report;
  }
  // A group-wise weight is not a plain int8 one.
  auto grouped = device->pack_groupwise_weight(w.data(), k, n, ElementType::kInt8, group);
  ASSERT_TRUE(grouped.is_ok());
  EXPECT_EQ(
      device->gemm_int8(a.data(), ElementType::kInt8, m, *grouped.value(), got.data(), {}).code(),
      StatusCode::kInvalidArgument);
}

// The modelled host time in a profile report ("+ host X ms").
double reported_host_ms(const std::string& report) {
  const size_t at = report.find("+ host ");
  EXPECT_NE(at, std::string::npos) << report;
  return at == std::string::npos ? -1.0 : std::strtod(report.c_str() + at + 7, nullptr);
}

TEST(RocketDevice, HostPassesReachTheSimLibrarysProfile) {
  auto device = rocket_on_sim();
  ASSERT_NE(device, nullptr);
  // A call first, so the device's group exists in the library.
  const int64_t m = 4, k = 64, n = 16;
  const auto w = random_ints<int8_t>(static_cast<size_t>(k * n), -127, 127, 3);
  const auto a = random_ints<int8_t>(static_cast<size_t>(m * k), -127, 127, 4);
  std::vector<float> scales(n * 2, 0.5f), a_scales(m * 2, 0.25f), c(m * n);
  auto packed = device->pack_groupwise_weight(w.data(), k, n, ElementType::kInt8, 32);
  ASSERT_TRUE(packed.is_ok());
  ASSERT_TRUE(device
                  ->gemm_groupwise(a.data(), a_scales.data(), m, *packed.value(), scales.data(),
                                   c.data(), {})
                  .is_ok());
  const double before = reported_host_ms(device->profile_report());
  device->account_host_pass(1e9, 0);
  const double added = reported_host_ms(device->profile_report()) - before;
  const double expected = sim::board_cpu_us({sim::CpuWorkClass::kGemm, 2e9, 0, 0, false, 1},
                                            sim::CpuPool::kNpuflowHost) /
                          1e3;
  EXPECT_NEAR(added, expected, 1e-3 * expected);
}

// librocketnpu's flash attention takes one dense mask for all of a call's heads: a relative bias
// runs as one library call per head and per band of queries whose mask (band x kv fp16) stays
// within 1 MiB, and gives the sim device's answer for the same bias written as that mask.
TEST(RocketDevice, RelativeBiasRunsInBandsOfQueriesPerHead) {
  auto device = rocket_on_sim();
  ASSERT_NE(device, nullptr);
  const int64_t t = 300, grid = 64, kv = grid * grid, hd = 32, heads = 2;
  const auto q = random_halves(static_cast<size_t>(heads * t * hd), 1);
  const auto k = random_halves(static_cast<size_t>(heads * kv * hd), 2);
  const auto v = random_halves(static_cast<size_t>(heads * hd * kv), 3);
  const auto rows = random_halves(static_cast<size_t>(heads * t * grid), 4);
  const auto cols = random_halves(static_cast<size_t>(heads * t * grid), 5);
  std::vector<uint16_t> out(static_cast<size_t>(heads * t * hd));
  Fp16Attention call{t,      kv,       hd,       hd,       heads,   heads,
                     0.125f, q.data(), k.data(), v.data(), nullptr, out.data()};
  call.relative = {grid, grid, rows.data(), cols.data()};
  ASSERT_TRUE(device->attention_fp16(call, {}).is_ok());
  // 1 MiB / (4096 keys x 2 bytes) = 128 queries a band: 3 bands of 300, for each of 2 heads.
  EXPECT_NE(device->profile_report().find("rocket_flash_attn_fp16_ctx calls=6"), std::string::npos)
      << device->profile_report();
  // The sim device, given each band's bias as a dense mask, answers the same bit for bit (its
  // fp16 tiling depends on the query count, so the comparison runs band by band too).
  sim::SimDevice sim;
  const int64_t band = 128;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t first = 0; first < t; first += band) {
      const int64_t n = std::min(band, t - first);
      std::vector<uint16_t> mask(static_cast<size_t>(n * kv)), part(static_cast<size_t>(n * hd));
      for (int64_t i = 0; i < n; ++i) {
        const int64_t row = h * t + first + i;
        for (int64_t j = 0; j < kv; ++j) {
          mask[i * kv + j] = float_to_half_bits(half_bits_to_float(rows[row * grid + j / grid]) +
                                                half_bits_to_float(cols[row * grid + j % grid]));
        }
      }
      Fp16Attention dense{n,
                          kv,
                          hd,
                          hd,
                          1,
                          1,
                          0.125f,
                          q.data() + (h * t + first) * hd,
                          k.data() + h * kv * hd,
                          v.data() + h * hd * kv,
                          mask.data(),
                          part.data()};
      ASSERT_TRUE(sim.attention_fp16(dense, {}).is_ok());
      EXPECT_TRUE(std::equal(part.begin(), part.end(), out.begin() + (h * t + first) * hd))
          << "head " << h << " band at " << first;
    }
  }
}

// A band mask is the factors' sum rounded to fp16: where the sum is beyond fp16's range (each term
// within it) the call is refused before the library is called, and the host, which adds the terms
// in fp32, takes it.
TEST(RocketDevice, ARelativeBiasSumBeyondFp16IsRefused) {
  auto device = rocket_on_sim();
  ASSERT_NE(device, nullptr);
  const int64_t t = 4, grid = 2, kv = grid * grid, hd = 32;
  const auto q = random_halves(static_cast<size_t>(t * hd), 7);
  const auto k = random_halves(static_cast<size_t>(kv * hd), 8);
  const auto v = random_halves(static_cast<size_t>(hd * kv), 9);
  std::vector<uint16_t> rows(static_cast<size_t>(t * grid), float_to_half_bits(0.5f));
  std::vector<uint16_t> cols(rows.size(), float_to_half_bits(0.25f));
  rows[3] = cols[3] = float_to_half_bits(40000.0f);  // query 1: 80000 at its last key
  std::vector<uint16_t> out(static_cast<size_t>(t * hd));
  Fp16Attention call{t,      kv,       hd,       hd,       1,       1,
                     0.125f, q.data(), k.data(), v.data(), nullptr, out.data()};
  call.relative = {grid, grid, rows.data(), cols.data()};
  const Status status = device->attention_fp16(call, {});
  EXPECT_EQ(status.code(), StatusCode::kUnsupported) << status.to_string();
  EXPECT_NE(status.message().find("beyond fp16"), std::string::npos) << status.to_string();
  EXPECT_EQ(device->profile_report().find("rocket_flash_attn_fp16_ctx"), std::string::npos)
      << device->profile_report();
  HostDevice host{DeviceOptions{}};
  ASSERT_TRUE(host.attention_fp16(call, {}).is_ok());
  // Query 1's last key dominates: its output row is that key's value column.
  for (int64_t c = 0; c < hd; ++c) {
    EXPECT_EQ(out[(1 * hd) + c], v[c * kv + kv - 1]) << c;
  }
}

TEST(RocketDevice, RefusalsAreUnsupportedWithTheLibrarysReason) {
  auto device = rocket_on_sim();
  ASSERT_NE(device, nullptr);
  const auto w = random_ints<int8_t>(64 * 32, -128, 127, 7);
  auto packed = device->pack_int8_weight(w.data(), 64, 32);
  ASSERT_TRUE(packed.is_ok());
  std::vector<int8_t> a(6 * 64, 1);
  std::vector<int32_t> c(6 * 32);
  Status rows = device->gemm_int8(a.data(), ElementType::kInt8, 6, *packed.value(), c.data(), {});
  EXPECT_EQ(rows.code(), StatusCode::kUnsupported);
  EXPECT_NE(rows.message().find("ROCKET_E_SHAPE"), std::string::npos) << rows.message();
  // fp16 resident weights serve the M they were planned for; another tiling is ROCKET_E_TILING.
  const auto h = random_halves(1024 * 64, 8);
  auto fp16 = device->pack_fp16_weight(h.data(), 1024, 64);
  ASSERT_TRUE(fp16.is_ok());
  std::vector<uint16_t> x(8 * 1024, 0), y(8 * 64);
  Status tiling =
      device->gemm_fp16(x.data(), 8, *fp16.value(), y.data(), ElementType::kFloat16, {});
  EXPECT_EQ(tiling.code(), StatusCode::kUnsupported);
  EXPECT_NE(tiling.message().find("ROCKET_E_TILING"), std::string::npos) << tiling.message();
  EXPECT_NE(device->profile_report().find("refused rocket_matmul_int8_prepacked -1"),
            std::string::npos);
  // No fp32 matmul on the NPU.
  float f[32 * 32] = {};
  EXPECT_EQ(device->pack_float_weight(f, 32, 32).status().code(), StatusCode::kUnsupported);
}

TEST(RocketDevice, InjectedSubmitFailuresAreDeviceFailures) {
  setenv("ROCKETSIM_FAIL_EVERY", "3", 1);
  auto device = rocket_on_sim();
  ASSERT_NE(device, nullptr);
  const auto w = random_ints<int8_t>(32 * 32, -128, 127, 9);
  auto packed = device->pack_int8_weight(w.data(), 32, 32);  // the context reads it here
  unsetenv("ROCKETSIM_FAIL_EVERY");
  ASSERT_TRUE(packed.is_ok());
  std::vector<int8_t> a(4 * 32, 3);
  std::vector<int32_t> c(4 * 32);
  std::vector<StatusCode> codes;
  for (int call = 0; call < 6; ++call) {
    codes.push_back(
        device->gemm_int8(a.data(), ElementType::kInt8, 4, *packed.value(), c.data(), {}).code());
  }
  const std::vector<StatusCode> want = {
      StatusCode::kOk, StatusCode::kOk, StatusCode::kDeviceFailure,
      StatusCode::kOk, StatusCode::kOk, StatusCode::kDeviceFailure};
  EXPECT_EQ(codes, want);
}

// A convolution whose smallest tile overflows the CBUF (one 3x3 kernel over 1800 channels, padded
// to 1824: 32.8 KB against a 32 KiB bank) is the library's -4 from its plan: a device failure the
// caller reruns on the host, with the library's reason. 1792 channels fit.
TEST(RocketDevice, AConvolutionBeyondTheCbufIsTheLibrarysDeviceFailure) {
  auto device = rocket_on_sim();
  ASSERT_NE(device, nullptr);
  for (const int64_t ic : {int64_t{1792}, int64_t{1800}}) {
    const auto input = random_halves(static_cast<size_t>(ic * 3 * 3), 10);
    const auto weight = random_halves(static_cast<size_t>(16 * ic * 9), 11);
    std::vector<uint16_t> out(16);
    Fp16Conv2d call{.ic = ic, .ih = 3, .iw = 3, .oc = 16, .kh = 3, .kw = 3};
    call.input = input.data();
    call.weight = weight.data();
    call.out = out.data();
    const Status status = device->conv2d_fp16(call, {});
    if (ic == 1792) {
      EXPECT_TRUE(status.is_ok()) << status.to_string();
      continue;
    }
    EXPECT_EQ(status.code(), StatusCode::kDeviceFailure);
    EXPECT_NE(status.message().find("ROCKET_E_DEVICE from rocket_conv2d_fp16_ctx"),
              std::string::npos)
        << status.message();
    EXPECT_NE(status.message().find("does not fit the CBUF"), std::string::npos)
        << status.message();
  }
}

TEST(RocketDevice, ConcurrentCallersShareOneContextSafely) {
  // librocketnpu contexts are not thread-safe; the sim library fails a call that overlaps
  // another on its context, so any overlap the adapter let through shows here.
  auto device = rocket_on_sim();
  ASSERT_NE(device, nullptr);
  HostDevice host{DeviceOptions{}};
  const int64_t k = 512, n = 256, m = 64;
  const auto w = random_ints<int8_t>(static_cast<size_t>(k * n), -128, 127, 11);
  auto packed = device->pack_int8_weight(w.data(), k, n);
  auto reference = host.pack_int8_weight(w.data(), k, n);
  ASSERT_TRUE(packed.is_ok() && reference.is_ok());
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int call = 0; call < 25; ++call) {
        const auto a = random_ints<int8_t>(static_cast<size_t>(m * k), -128, 127,
                                           static_cast<uint32_t>(1000 + t * 100 + call));
        std::vector<int32_t> got(static_cast<size_t>(m * n)), want(got.size());
        Status status =
            device->gemm_int8(a.data(), ElementType::kInt8, m, *packed.value(), got.data(), {});
        (void)host.gemm_int8(a.data(), ElementType::kInt8, m, *reference.value(), want.data(), {});
        if (!status.is_ok() || got != want) wrong[t]++;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong, std::vector<int>(4, 0));
}

TEST(RocketSimLibrary, ANullWeightIsRefusedWithAReason) {
  void* library = dlopen(NPUFLOW_ROCKETNPU_SIM, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(library, nullptr) << dlerror();
  // The entry points by their C signatures, the library's opaque types as void.
  const auto create = reinterpret_cast<void* (*)(int)>(dlsym(library, "rocket_i8_ctx_create"));
  const auto pack = reinterpret_cast<void* (*)(void*, int, int, int, const int8_t*)>(
      dlsym(library, "rocket_i8_weights_pack"));
  const auto free_ctx = reinterpret_cast<void (*)(void*)>(dlsym(library, "rocket_i8_ctx_free"));
  const auto last_error =
      reinterpret_cast<const char* (*)()>(dlsym(library, "rocketsim_last_error"));
  ASSERT_TRUE(create != nullptr && pack != nullptr && free_ctx != nullptr && last_error != nullptr);
  void* ctx = create(1);
  ASSERT_NE(ctx, nullptr);
  EXPECT_EQ(pack(ctx, 256, 32, 32, nullptr), nullptr);
  EXPECT_STREQ(last_error(), "null weights (B)");
  free_ctx(ctx);
  dlclose(library);
}

TEST(RocketDevice, FreedWeightsLeaveNoResidentBytes) {
  auto device = rocket_on_sim();
  ASSERT_NE(device, nullptr);
  {
    const auto w = random_ints<int8_t>(64 * 64, -128, 127, 12);
    const auto h = random_halves(64 * 64, 13);
    auto a = device->pack_int8_weight(w.data(), 64, 64);
    auto b = device->pack_fp16_weight(h.data(), 64, 64);
    ASSERT_TRUE(a.is_ok() && b.is_ok());
    EXPECT_EQ(device->profile_report().find(", 0 resident weight bytes"), std::string::npos);
  }
  EXPECT_NE(device->profile_report().find(", 0 resident weight bytes"), std::string::npos)
      << device->profile_report();
}

}  // namespace
}  // namespace npuflow
