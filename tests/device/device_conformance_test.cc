// The device conformance suite (after IREE's CTS): one set of tests over the Device interface,
// run on every device this build can reach: host, sim, rocket on librocketnpu-sim (when the
// rocket module is built) and rocket on the board's librocketnpu (when a board is usable). Each
// primitive at a grid of shapes around the RK3588 contract's edges (K and N at, below and above
// their multiples, M at the device's row multiple and resident plan), every operand type, refusal
// semantics (a refusal is kUnsupported, never a wrong answer), foreign weights, and 4 threads on
// one device. An optional primitive a device does not offer must refuse; one it offers must be
// exact (integers) or within the fp16 bound. Opt-outs are explicit and say why: a target this
// machine cannot reach skips with the reason (no board: the probe's summary). What only some
// devices can be told to do (injected failures, a small IOVA window) runs on the simulator, direct
// and through the rocket adapter, and opts out elsewhere with the reason.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

#include "core/fp16.h"
#include "core/strings.h"
#include "host/host_device.h"
#include "random_operands.h"
#include "route/device_selection.h"
#include "sim/sim_device.h"

namespace npuflow {
namespace {

using device_test::random_halves;
using device_test::random_ints;

// The device for a target, or why this machine cannot run it (the test then skips, saying so).
Result<std::unique_ptr<Device>> make_device(const std::string& name) {
  if (name == "host") return std::unique_ptr<Device>(std::make_unique<HostDevice>(DeviceOptions{}));
  if (name == "sim") return std::unique_ptr<Device>(std::make_unique<sim::SimDevice>());
  DeviceConfig config;
  config.name = "rocket";
  if (name == "rocket_sim") {
#if defined(NPUFLOW_ROCKET_MODULE)
    config.rocket_module = NPUFLOW_ROCKET_MODULE;
    config.rocketnpu = NPUFLOW_ROCKETNPU_SIM;
#else
    return unsupported("this build has no rocket module (no librocketnpu headers at configure)");
#endif
  } else {
    const BoardProbe probe = probe_board();
    if (!probe.usable()) return unsupported(str_cat("no board: ", probe.summary()));
#if defined(NPUFLOW_ROCKET_MODULE)
    config.rocket_module = NPUFLOW_ROCKET_MODULE;
#endif
  }
  auto chosen = create_device(config);
  if (!chosen.is_ok()) return chosen.status();
  return std::move(chosen.value().device);
}

// The same device told to misbehave (injected submit failures, a small IOVA window), or why it
// cannot be: the host has nothing to inject into, and a board's faults are not ours to cause.
Result<std::unique_ptr<Device>> make_faulty_device(const std::string& name,
                                                   const sim::SimOptions& faults) {
  if (name == "sim") return std::unique_ptr<Device>(std::make_unique<sim::SimDevice>(faults));
  if (name == "rocket_sim") {
#if defined(NPUFLOW_ROCKET_MODULE)
    DeviceConfig config;
    config.name = "sim";  // the rocket adapter on librocketnpu-sim, the faults as its options
    config.sim = faults;
    config.sim_via = "rocket";
    config.rocket_module = NPUFLOW_ROCKET_MODULE;
    config.rocket_sim_library = NPUFLOW_ROCKETNPU_SIM;
    auto chosen = create_device(config);
    if (!chosen.is_ok()) return chosen.status();
    return std::move(chosen.value().device);
#else
    return unsupported("this build has no rocket module (no librocketnpu headers at configure)");
#endif
  }
  return unsupported(str_cat(name, " cannot be told to fail (only the simulator can)"));
}

class Conformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto device = make_device(GetParam());
    if (!device.is_ok()) GTEST_SKIP() << GetParam() << ": " << device.status().message();
    device_ = std::move(device).value();
  }
  // Rows a call may have: m rounded up to the device's multiple (callers pad).
  int64_t rows(int64_t m, ElementType operand) const {
    const int64_t multiple = device_->row_multiple(operand);
    return std::max((m + multiple - 1) / multiple * multiple, device_->resident_min_rows(operand));
  }
  std::unique_ptr<Device> device_;
};

// The definition: int64 sums of a[m][k] * w[k][n], a read as int8 or uint8.
std::vector<int32_t> integer_reference(const uint8_t* a, bool a_signed, const int8_t* w, int64_t m,
                                       int64_t k, int64_t n) {
  std::vector<int32_t> c(static_cast<size_t>(m * n));
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t col = 0; col < n; ++col) {
      int64_t sum = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const int64_t x = a_signed ? static_cast<int8_t>(a[r * k + kk]) : a[r * k + kk];
        sum += x * w[kk * n + col];
      }
      c[static_cast<size_t>(r * n + col)] = static_cast<int32_t>(sum);
    }
  }
  return c;
}

// K and N at, below and above the contract's multiples (32; 16 and 32 for N), and larger.
constexpr int64_t kKs[] = {1, 31, 32, 33, 96, 300};
constexpr int64_t kNs[] = {1, 15, 16, 17, 32, 33, 100};

TEST_P(Conformance, Int8GemmIsExactOverTheShapeGrid) {
  uint32_t seed = 1;
  for (int64_t k : kKs) {
    for (int64_t n : kNs) {
      const auto w = random_ints<int8_t>(static_cast<size_t>(k * n), -128, 127, seed++);
      auto packed = device_->pack_int8_weight(w.data(), k, n);
      ASSERT_TRUE(packed.is_ok()) << k << "x" << n << ": " << packed.status().to_string();
      for (int64_t m : {int64_t{1}, int64_t{5}, int64_t{64}}) {
        const int64_t mp = rows(m, ElementType::kInt8);
        for (bool a_signed : {true, false}) {
          const auto a = random_ints<uint8_t>(static_cast<size_t>(mp * k), 0, 255, seed++);
          std::vector<int32_t> c(static_cast<size_t>(mp * n));
          const ElementType type = a_signed ? ElementType::kInt8 : ElementType::kUInt8;
          Status status = device_->gemm_int8(a.data(), type, mp, *packed.value(), c.data(), {});
          ASSERT_TRUE(status.is_ok())
              << "m=" << mp << " k=" << k << " n=" << n << ": " << status.to_string();
          ASSERT_EQ(c, integer_reference(a.data(), a_signed, w.data(), mp, k, n))
              << "m=" << mp << " k=" << k << " n=" << n << (a_signed ? " int8" : " uint8");
        }
      }
    }
  }
}

TEST_P(Conformance, Fp16GemmIsWithinTheFp16Bound) {
  uint32_t seed = 100;
  for (int64_t k : {32, 200, 1024}) {
    for (int64_t n : {16, 50, 256}) {
      const auto w = random_halves(static_cast<size_t>(k * n), seed++);
      auto packed = device_->pack_fp16_weight(w.data(), k, n);
      if (!packed.is_ok()) {
        ASSERT_EQ(packed.status().code(), StatusCode::kUnsupported);
        GTEST_SKIP() << GetParam() << " offers no fp16 GEMM: " << packed.status().message();
      }
      const int64_t m = rows(8, ElementType::kFloat16);
      const auto a = random_halves(static_cast<size_t>(m * k), seed++);
      for (ElementType c_type : {ElementType::kFloat16, ElementType::kFloat32}) {
        std::vector<uint8_t> c(static_cast<size_t>(m * n) * 4);
        Status status = device_->gemm_fp16(a.data(), m, *packed.value(), c.data(), c_type, {});
        ASSERT_TRUE(status.is_ok()) << status.to_string();
        double error = 0, norm = 0;
        for (int64_t r = 0; r < m; ++r) {
          for (int64_t col = 0; col < n; ++col) {
            double exact = 0;
            for (int64_t kk = 0; kk < k; ++kk) {
              exact += static_cast<double>(half_bits_to_float(a[r * k + kk])) *
                       half_bits_to_float(w[kk * n + col]);
            }
            const size_t i = static_cast<size_t>(r * n + col);
            const double got =
                c_type == ElementType::kFloat32
                    ? reinterpret_cast<const float*>(c.data())[i]
                    : half_bits_to_float(reinterpret_cast<const uint16_t*>(c.data())[i]);
            error += (got - exact) * (got - exact);
            norm += exact * exact;
          }
        }
        // fp16 operands are exact; the bound is the NPU's fp16 partials (reference §2: ~0.2-0.4%).
        EXPECT_LT(std::sqrt(error / norm), 5e-3) << GetParam() << " k=" << k << " n=" << n;
      }
    }
  }
}

TEST_P(Conformance, OptionalInt4AndGroupwiseAreExactOrRefused) {
  // N = 50 is below int4's and int8's N multiples; plain int4 also takes K = 250.
  const int64_t k = 256, n = 50, m = rows(8, ElementType::kInt8);
  const auto w = random_ints<int8_t>(static_cast<size_t>(k * n), -7, 7, 7);
  const auto a = random_ints<int8_t>(static_cast<size_t>(m * k), -7, 7, 8);
  const auto a_bytes = std::vector<uint8_t>(a.begin(), a.end());
  const auto want = integer_reference(a_bytes.data(), true, w.data(), m, k, n);
  auto int4 = device_->pack_int4_weight(w.data(), k, n);
  if (int4.is_ok()) {
    std::vector<int32_t> c(static_cast<size_t>(m * n));
    ASSERT_TRUE(device_->gemm_int4(a.data(), m, *int4.value(), c.data(), {}).is_ok());
    EXPECT_EQ(c, want);
    // K = 250: the first 250 rows of the weight, the first 250 columns of a.
    const int64_t k_short = 250;
    std::vector<int8_t> a_short(static_cast<size_t>(m * k_short));
    for (int64_t r = 0; r < m; ++r) {
      std::copy(a.begin() + r * k, a.begin() + r * k + k_short, a_short.begin() + r * k_short);
    }
    auto short_weight = device_->pack_int4_weight(w.data(), k_short, n);
    ASSERT_TRUE(short_weight.is_ok()) << short_weight.status().to_string();
    ASSERT_TRUE(device_->gemm_int4(a_short.data(), m, *short_weight.value(), c.data(), {}).is_ok());
    const std::vector<uint8_t> short_bytes(a_short.begin(), a_short.end());
    EXPECT_EQ(c, integer_reference(short_bytes.data(), true, w.data(), m, k_short, n));
  } else {
    EXPECT_EQ(int4.status().code(), StatusCode::kUnsupported) << int4.status().to_string();
  }
  const int64_t group = 64, groups = k / group;
  auto grouped = device_->pack_groupwise_weight(w.data(), k, n, ElementType::kInt8, group);
  if (!grouped.is_ok()) {
    EXPECT_EQ(grouped.status().code(), StatusCode::kUnsupported) << grouped.status().to_string();
    return;
  }
  std::vector<float> a_scales(static_cast<size_t>(m * groups)),
      w_scales(static_cast<size_t>(n * groups));
  for (size_t i = 0; i < a_scales.size(); ++i) a_scales[i] = 0.01f * static_cast<float>(1 + i % 7);
  for (size_t i = 0; i < w_scales.size(); ++i) w_scales[i] = 0.02f * static_cast<float>(1 + i % 5);
  std::vector<float> c(static_cast<size_t>(m * n));
  ASSERT_TRUE(device_
                  ->gemm_groupwise(a.data(), a_scales.data(), m, *grouped.value(), w_scales.data(),
                                   c.data(), {})
                  .is_ok());
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t col = 0; col < n; ++col) {
      float expected = 0;
      for (int64_t g = 0; g < groups; ++g) {
        int64_t partial = 0;
        for (int64_t kk = g * group; kk < (g + 1) * group; ++kk)
          partial += a[r * k + kk] * w[kk * n + col];
        expected +=
            a_scales[r * groups + g] * w_scales[col * groups + g] * static_cast<float>(partial);
      }
      EXPECT_NEAR(c[r * n + col], expected, 1e-5f * std::max(1.0f, std::abs(expected)));
    }
  }
}

TEST_P(Conformance, ARefusalIsUnsupportedAndForeignWeightsAreInvalid) {
  const auto w = random_ints<int8_t>(64 * 32, -128, 127, 9);
  auto packed = device_->pack_int8_weight(w.data(), 64, 32);
  ASSERT_TRUE(packed.is_ok());
  const int64_t multiple = device_->row_multiple(ElementType::kInt8);
  if (multiple > 1) {
    // A row count off the device's multiple is refused, never answered wrongly.
    const int64_t m = multiple + 1;
    std::vector<int8_t> a(static_cast<size_t>(m * 64), 1);
    std::vector<int32_t> c(static_cast<size_t>(m * 32));
    EXPECT_EQ(
        device_->gemm_int8(a.data(), ElementType::kInt8, m, *packed.value(), c.data(), {}).code(),
        StatusCode::kUnsupported);
  }
  // A weight packed by another device is the caller's bug, reported as such.
  HostDevice host{DeviceOptions{}};
  sim::SimDevice sim;
  Device& other = device_->name() == "host" ? static_cast<Device&>(sim) : host;
  auto foreign = other.pack_int8_weight(w.data(), 64, 32);
  ASSERT_TRUE(foreign.is_ok());
  const int64_t m = rows(4, ElementType::kInt8);
  std::vector<int8_t> a(static_cast<size_t>(m * 64), 1);
  std::vector<int32_t> c(static_cast<size_t>(m * 32));
  EXPECT_EQ(
      device_->gemm_int8(a.data(), ElementType::kInt8, m, *foreign.value(), c.data(), {}).code(),
      StatusCode::kInvalidArgument);
  // An empty weight is invalid everywhere.
  EXPECT_EQ(device_->pack_int8_weight(w.data(), 0, 32).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_P(Conformance, FourThreadsOnOneDeviceGetExactResults) {
  const int64_t k = 256, n = 96, m = rows(16, ElementType::kInt8);
  const auto w = random_ints<int8_t>(static_cast<size_t>(k * n), -128, 127, 11);
  auto packed = device_->pack_int8_weight(w.data(), k, n);
  ASSERT_TRUE(packed.is_ok());
  std::vector<int> wrong(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int call = 0; call < 20; ++call) {
        const auto a = random_ints<uint8_t>(static_cast<size_t>(m * k), 0, 255,
                                            static_cast<uint32_t>(1000 + 100 * t + call));
        std::vector<int32_t> c(static_cast<size_t>(m * n));
        Status status =
            device_->gemm_int8(a.data(), ElementType::kUInt8, m, *packed.value(), c.data(), {});
        if (!status.is_ok() || c != integer_reference(a.data(), false, w.data(), m, k, n)) {
          wrong[t]++;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong, std::vector<int>(4, 0));
}

// Injected submit failures (every third call) are kDeviceFailure, and every call that succeeds
// is exact: a failing device never answers wrongly. Attention calls count among them.
TEST_P(Conformance, InjectedFailuresAreDeviceFailuresNeverWrongAnswers) {
  sim::SimOptions faults;
  faults.fail_every = 3;
  auto faulty = make_faulty_device(GetParam(), faults);
  if (!faulty.is_ok()) GTEST_SKIP() << faulty.status().message();
  Device& device = *faulty.value();
  const int64_t k = 96, n = 48, m = rows(8, ElementType::kInt8);
  const auto w = random_ints<int8_t>(static_cast<size_t>(k * n), -128, 127, 21);
  auto packed = device.pack_int8_weight(w.data(), k, n);
  ASSERT_TRUE(packed.is_ok()) << packed.status().to_string();
  int failed = 0, exact = 0;
  for (uint32_t call = 0; call < 9; ++call) {
    const auto a = random_ints<int8_t>(static_cast<size_t>(m * k), -128, 127, 30 + call);
    std::vector<int32_t> c(static_cast<size_t>(m * n));
    const Status status =
        device.gemm_int8(a.data(), ElementType::kInt8, m, *packed.value(), c.data(), {});
    if (!status.is_ok()) {
      EXPECT_EQ(status.code(), StatusCode::kDeviceFailure) << status.to_string();
      failed++;
    } else {
      const std::vector<uint8_t> bytes(a.begin(), a.end());
      exact += c == integer_reference(bytes.data(), true, w.data(), m, k, n);
    }
  }
  EXPECT_EQ(failed, 3);
  EXPECT_EQ(exact, 6);
  // Calls 10..12: the twelfth fails, an attention call among them included.
  int attention_failed = 0;
  for (uint32_t call = 0; call < 3; ++call) {
    std::vector<uint16_t> q = random_halves(8 * 32, 40 + call), out(8 * 32);
    const Fp16Attention attention{8,    8,        32,       32,       1,       1,
                                  0.2f, q.data(), q.data(), q.data(), nullptr, out.data()};
    const Status status = device.attention_fp16(attention, {});
    if (!status.is_ok()) {
      EXPECT_EQ(status.code(), StatusCode::kDeviceFailure) << status.to_string();
      attention_failed++;
    }
  }
  EXPECT_EQ(attention_failed, 1);
  // Calls 13..15: the fifteenth, a convolution, fails.
  int conv_failed = 0;
  for (uint32_t call = 0; call < 3; ++call) {
    std::vector<uint16_t> input = random_halves(16 * 4 * 4, 60 + call), weight = input,
                          out(16 * 4 * 4);
    Fp16Conv2d conv{.ic = 16, .ih = 4, .iw = 4, .oc = 16, .kh = 1, .kw = 1};
    conv.input = input.data();
    conv.weight = weight.data();
    conv.out = out.data();
    const Status status = device.conv2d_fp16(conv, {});
    if (!status.is_ok()) {
      EXPECT_EQ(status.code(), StatusCode::kDeviceFailure) << status.to_string();
      conv_failed += call == 2;
    }
  }
  EXPECT_EQ(conv_failed, 1);
}

// A weight beyond the IOVA window is refused (never a crash, never a wrong answer later); the
// weights already resident keep computing exactly, and freeing one makes room again.
TEST_P(Conformance, IovaExhaustionRefusesThePackAndKeepsTheResidentWeights) {
  sim::SimOptions faults;
  faults.iova_bytes_per_fd = 5 * 64 * 1024;  // room for five 256 x 256 int8 weights on one fd
  faults.workers = 1;
  auto faulty = make_faulty_device(GetParam(), faults);
  if (!faulty.is_ok()) GTEST_SKIP() << faulty.status().message();
  Device& device = *faulty.value();
  const int64_t k = 256, n = 256, m = rows(4, ElementType::kInt8);
  std::vector<std::unique_ptr<PackedWeight>> resident;
  std::vector<std::vector<int8_t>> weights;
  Status refused = Status::ok();
  for (uint32_t i = 0; i < 64 && refused.is_ok(); ++i) {
    weights.push_back(random_ints<int8_t>(static_cast<size_t>(k * n), -128, 127, 50 + i));
    auto packed = device.pack_int8_weight(weights.back().data(), k, n);
    if (packed.is_ok()) {
      resident.push_back(std::move(packed).value());
    } else {
      refused = packed.status();
      weights.pop_back();
    }
  }
  ASSERT_FALSE(refused.is_ok()) << "64 weights of 64 KiB fit a 320 KiB window";
  EXPECT_TRUE(refused.code() == StatusCode::kResourceExhausted ||
              refused.code() == StatusCode::kUnsupported)
      << refused.to_string();
  EXPECT_NE(refused.message().find("ROCKET_E_NOMEM"), std::string::npos) << refused.to_string();
  ASSERT_GE(resident.size(), 3u);
  // Freeing two weights makes room for a call's buffers and for a weight again.
  resident.pop_back();
  resident.pop_back();
  const auto a = random_ints<int8_t>(static_cast<size_t>(m * k), -128, 127, 99);
  const std::vector<uint8_t> bytes(a.begin(), a.end());
  std::vector<int32_t> c(static_cast<size_t>(m * n));
  const Status status =
      device.gemm_int8(a.data(), ElementType::kInt8, m, *resident.front(), c.data(), {});
  ASSERT_TRUE(status.is_ok()) << status.to_string();
  EXPECT_EQ(c, integer_reference(bytes.data(), true, weights.front().data(), m, k, n));
  EXPECT_TRUE(device.pack_int8_weight(weights.back().data(), k, n).is_ok());
}

// Attention operands in the Fp16Attention layout, values in [-1, 1]; with `masked`, an additive
// mask with about a quarter of the keys at -inf, 0.5-sized finite entries elsewhere, and query row
// 0 fully masked (a device gives it zeros).
struct AttentionOperands {
  std::vector<uint16_t> q, k, v, mask, out;
  Fp16Attention call;
};

AttentionOperands attention_operands(int64_t t, int64_t kv, int64_t hd, int64_t dv, int64_t heads,
                                     int64_t kv_heads, bool masked, uint32_t seed) {
  AttentionOperands o;
  o.q = random_halves(static_cast<size_t>(heads * t * hd), seed);
  o.k = random_halves(static_cast<size_t>(kv_heads * kv * hd), seed + 1);
  o.v = random_halves(static_cast<size_t>(kv_heads * dv * kv), seed + 2);
  o.out.assign(static_cast<size_t>(heads * t * dv), 0x7e00);  // NaN until written
  if (masked) {
    o.mask = random_halves(static_cast<size_t>(t * kv), seed + 3);
    std::mt19937 rng(seed + 4);
    for (size_t i = 0; i < o.mask.size(); ++i) {
      if (i < static_cast<size_t>(kv) || rng() % 4 == 0) o.mask[i] = 0xfc00;  // -inf
    }
  }
  o.call = Fp16Attention{t,
                         kv,
                         hd,
                         dv,
                         heads,
                         kv_heads,
                         1.0f / std::sqrt(float(hd)),
                         o.q.data(),
                         o.k.data(),
                         o.v.data(),
                         masked ? o.mask.data() : nullptr,
                         o.out.data()};
  return o;
}

// The definition in double (the soft-cap included); a row whose scores are all -inf gives zeros.
std::vector<double> attention_reference(const Fp16Attention& c) {
  std::vector<double> out(static_cast<size_t>(c.heads * c.tokens * c.dv), 0.0);
  const int64_t group = c.heads / c.kv_heads;
  for (int64_t h = 0; h < c.heads; ++h) {
    const int64_t g = h / group;
    for (int64_t i = 0; i < c.tokens; ++i) {
      std::vector<double> s(static_cast<size_t>(c.kv));
      double max = -INFINITY, sum = 0;
      for (int64_t j = 0; j < c.kv; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < c.head_dim; ++d) {
          dot += double(half_bits_to_float(c.q[(h * c.tokens + i) * c.head_dim + d])) *
                 half_bits_to_float(c.k[(g * c.kv + j) * c.head_dim + d]);
        }
        double scaled = c.scale * dot;
        if (c.softcap > 0) scaled = c.softcap * std::tanh(scaled / c.softcap);
        s[j] = scaled + (c.mask ? half_bits_to_float(c.mask[i * c.kv + j]) : 0.0);
        if (c.relative.present()) {
          const Fp16RelativeBias& r = c.relative;
          s[j] += double(half_bits_to_float(r.rows[(h * c.tokens + i) * r.grid_h + j / r.grid_w])) +
                  half_bits_to_float(r.cols[(h * c.tokens + i) * r.grid_w + j % r.grid_w]);
        }
        max = std::max(max, s[j]);
      }
      if (max == -INFINITY) continue;
      for (double& e : s) sum += (e = std::exp(e - max));
      for (int64_t col = 0; col < c.dv; ++col) {
        double acc = 0;
        for (int64_t j = 0; j < c.kv; ++j) {
          acc += s[j] * half_bits_to_float(c.v[(g * c.dv + col) * c.kv + j]);
        }
        out[static_cast<size_t>((h * c.tokens + i) * c.dv + col)] = acc / sum;
      }
    }
  }
  return out;
}

// Worst |out - definition| of a call that ran.
double attention_error(const Fp16Attention& call, const std::vector<uint16_t>& out) {
  const std::vector<double> want = attention_reference(call);
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(double(half_bits_to_float(out[i])) - want[i]));
  }
  return worst;
}

// Attention is optional: a device that offers it is within the fp16 bound of the definition
// over a grid of tokens, keys, head sizes, grouped-query heads, masks (fully masked rows give
// zeros) and soft-caps (0.5 caps most scores here); one that does not refuses every call with
// kUnsupported.
TEST_P(Conformance, AttentionIsWithinTheFp16BoundOrRefused) {
  struct HeadShape {
    int64_t head_dim, dv, heads, kv_heads;
  };
  const HeadShape head_shapes[] = {{32, 16, 1, 1}, {64, 64, 4, 4}, {32, 48, 4, 2}, {64, 32, 2, 1}};
  std::optional<bool> offered;
  uint32_t seed = 100;
  for (int64_t t : {1, 4, 7, 64}) {
    for (int64_t kv : {1, 33, 100}) {
      for (const HeadShape& hs : head_shapes) {
        for (int variant = 0; variant < 4; ++variant) {
          const bool masked = variant % 2 == 1;
          const float softcap = variant / 2 == 1 ? 0.5f : 0.0f;
          SCOPED_TRACE(str_cat("t=", t, " kv=", kv, " hd=", hs.head_dim, " dv=", hs.dv,
                               " heads=", hs.heads, "/", hs.kv_heads, " masked=", masked,
                               " softcap=", softcap));
          AttentionOperands o = attention_operands(t, kv, hs.head_dim, hs.dv, hs.heads, hs.kv_heads,
                                                   masked, seed += 10);
          o.call.softcap = softcap;
          const Status status = device_->attention_fp16(o.call, {});
          if (!offered) offered = status.is_ok();
          if (!*offered) {
            ASSERT_EQ(status.code(), StatusCode::kUnsupported) << status.to_string();
            continue;
          }
          ASSERT_TRUE(status.is_ok()) << status.to_string();
          const double worst = attention_error(o.call, o.out);
          // |out| <= 1; fp16 operands, P rounded twice and a sum over <= 100 keys in fp16
          // tiles: a few ulps of 1 (0.001 each).
          EXPECT_LE(worst, 4e-3);
          if (masked) {  // query row 0 has every key masked
            for (int64_t h = 0; h < hs.heads; ++h) {
              for (int64_t col = 0; col < hs.dv; ++col) {
                ASSERT_EQ(o.out[static_cast<size_t>(h * t * hs.dv + col)] & 0x7fff, 0);
              }
            }
          }
        }
      }
    }
  }
  // The host is every primitive's reference and librocketnpu-sim has flash attention; only a
  // board's library may lack it.
  if (GetParam() != "rocket_board") {
    EXPECT_TRUE(*offered) << GetParam() << " must offer attention";
  }
}

// A decomposed relative-position bias (SAM's) is within the fp16 bound of the definition on every
// device that has attention: key grids from 1 x 1 to 4 x 25, windows batched as heads (8 heads of
// one window each), grouped kv heads, with and without a dense mask, factors up to 3 in size (so
// they reorder the softmax). The rocket device builds each band's mask from the factors: its
// bias is rounded to fp16 once more, and a query band of a large grid takes several library calls.
TEST_P(Conformance, RelativeBiasIsWithinTheFp16BoundOrRefused) {
  struct Case {
    int64_t tokens, grid_h, grid_w, heads, kv_heads;
  };
  const Case cases[] = {{1, 1, 1, 1, 1},   {7, 3, 5, 2, 2},  {64, 8, 8, 8, 8},
                        {16, 4, 25, 4, 2}, {49, 7, 7, 3, 1}, {300, 64, 64, 1, 1}};
  uint32_t seed = 900;
  for (const Case& c : cases) {
    for (bool masked : {false, true}) {
      const int64_t kv = c.grid_h * c.grid_w;
      SCOPED_TRACE(str_cat("tokens=", c.tokens, " grid=", c.grid_h, "x", c.grid_w,
                           " heads=", c.heads, "/", c.kv_heads, " masked=", masked));
      AttentionOperands o =
          attention_operands(c.tokens, kv, 32, 32, c.heads, c.kv_heads, masked, seed += 10);
      std::vector<uint16_t> rows = random_halves(size_t(c.heads * c.tokens * c.grid_h), seed + 5);
      std::vector<uint16_t> cols = random_halves(size_t(c.heads * c.tokens * c.grid_w), seed + 6);
      for (auto* factor : {&rows, &cols}) {
        for (uint16_t& v : *factor) v = float_to_half_bits(3.0f * half_bits_to_float(v));
      }
      o.call.relative = {c.grid_h, c.grid_w, rows.data(), cols.data()};
      const Status status = device_->attention_fp16(o.call, {});
      if (GetParam() == "rocket_board" && status.code() == StatusCode::kUnsupported) continue;
      ASSERT_TRUE(status.is_ok()) << status.to_string();
      // The bound above (measured worst: host 2.4e-4, sim 4.8e-4, rocket on the sim library
      // 1.6e-3, whose band masks round the bias to fp16 once more).
      EXPECT_LE(attention_error(o.call, o.out), 4e-3);
      // The bias moves the result: the same call without it is far off the definition with it.
      AttentionOperands plain =
          attention_operands(c.tokens, kv, 32, 32, c.heads, c.kv_heads, masked, seed);
      ASSERT_TRUE(device_->attention_fp16(plain.call, {}).is_ok());
      if (kv > 1) {
        EXPECT_GT(attention_error(o.call, plain.out), 0.05);
      }
    }
  }
  AttentionOperands o = attention_operands(4, 6, 32, 32, 1, 1, false, 7);
  std::vector<uint16_t> rows(8 * 3), cols(8 * 3);
  for (auto [h, w, rows_ptr, cols_ptr] :
       {std::tuple<int64_t, int64_t, const uint16_t*, const uint16_t*>{2, 2, rows.data(),
                                                                       cols.data()},
        {2, 3, rows.data(), nullptr},
        {0, 6, rows.data(), cols.data()}}) {
    o.call.relative = {h, w, rows_ptr, cols_ptr};
    EXPECT_EQ(device_->attention_fp16(o.call, {}).code(), StatusCode::kInvalidArgument)
        << h << "x" << w;
  }
}

// Calls no device can take are invalid arguments; shapes outside the RK3588's flash-attention
// rules (head_dim % 32, dv % 16) are refused by the NPU devices and computed by the host.
TEST_P(Conformance, AttentionRefusesOutsideItsContract) {
  AttentionOperands probe = attention_operands(8, 8, 32, 32, 1, 1, false, 5);
  const Status offered = device_->attention_fp16(probe.call, {});
  if (!offered.is_ok() && GetParam() == "rocket_board") GTEST_SKIP() << offered.to_string();
  ASSERT_TRUE(offered.is_ok()) << offered.to_string();
  AttentionOperands uneven = attention_operands(8, 8, 32, 32, 3, 2, false, 6);
  EXPECT_EQ(device_->attention_fp16(uneven.call, {}).code(), StatusCode::kInvalidArgument);
  AttentionOperands empty = attention_operands(8, 8, 32, 32, 1, 1, false, 7);
  empty.call.tokens = 0;
  EXPECT_EQ(device_->attention_fp16(empty.call, {}).code(), StatusCode::kInvalidArgument);
  for (float softcap : {-1.0f, std::numeric_limits<float>::infinity()}) {
    AttentionOperands capped = attention_operands(8, 8, 32, 32, 1, 1, false, 7);
    capped.call.softcap = softcap;
    EXPECT_EQ(device_->attention_fp16(capped.call, {}).code(), StatusCode::kInvalidArgument);
  }
  for (auto [hd, dv] : {std::pair<int64_t, int64_t>{40, 32}, {32, 24}}) {
    AttentionOperands odd = attention_operands(8, 8, hd, dv, 2, 2, false, 8);
    const Status status = device_->attention_fp16(odd.call, {});
    if (GetParam() == "host") {
      EXPECT_TRUE(status.is_ok()) << status.to_string();
    } else {
      EXPECT_EQ(status.code(), StatusCode::kUnsupported) << status.to_string();
    }
  }
}

// Convolution operands, values in [-1, 1]; the output NaN until written.
struct ConvOperands {
  std::vector<uint16_t> input, weight, out;
};

template <typename Call>
ConvOperands conv_operands(Call& call, int64_t weights, int64_t outputs, uint32_t seed) {
  ConvOperands o;
  o.input = random_halves(static_cast<size_t>(call.ic * call.ih * call.iw), seed);
  o.weight = random_halves(static_cast<size_t>(weights), seed + 1);
  o.out.assign(static_cast<size_t>(outputs), 0x7e00);
  call.input = o.input.data();
  call.weight = o.weight.data();
  call.out = o.out.data();
  return o;
}

ConvOperands conv2d_operands(Fp16Conv2d& call, uint32_t seed) {
  const int64_t weights = call.oc * (call.depthwise ? 1 : call.ic) * call.kh * call.kw;
  return conv_operands(call, weights,
                       call.oc * conv2d_output_height(call) * conv2d_output_width(call), seed);
}

ConvOperands conv_transpose2d_operands(Fp16ConvTranspose2d& call, uint32_t seed) {
  const int64_t weights = call.ic * (call.depthwise ? 1 : call.oc) * call.kh * call.kw;
  return conv_operands(
      call, weights,
      call.oc * conv_transpose2d_output_height(call) * conv_transpose2d_output_width(call), seed);
}

// A definition's value and the sum of its terms' magnitudes (what bounds the fp32 sum's error).
struct Exact {
  double value = 0, magnitude = 0;
  void add(double x, double w) {
    value += x * w;
    magnitude += std::abs(x * w);
  }
};

double half(const uint16_t* bits, int64_t i) {
  return half_bits_to_float(bits[i]);
}

// The definitions in double: the forward sum over taps, and the transposed one as a scatter of
// every input pixel into the output it reaches.
std::vector<Exact> conv2d_definition(const Fp16Conv2d& c) {
  const int64_t oh = conv2d_output_height(c), ow = conv2d_output_width(c);
  std::vector<Exact> out(static_cast<size_t>(c.oc * oh * ow));
  for (int64_t o = 0; o < c.oc; ++o) {
    for (int64_t ch = 0; ch < c.ic; ++ch) {
      if (c.depthwise && ch != o) continue;
      const int64_t wc = c.depthwise ? 0 : ch, per = c.depthwise ? 1 : c.ic;
      for (int64_t y = 0; y < oh; ++y) {
        for (int64_t x = 0; x < ow; ++x) {
          for (int64_t i = 0; i < c.kh; ++i) {
            for (int64_t j = 0; j < c.kw; ++j) {
              const int64_t r = y * c.stride_y + i * c.dil_y - c.pad_top;
              const int64_t s = x * c.stride_x + j * c.dil_x - c.pad_left;
              if (r < 0 || r >= c.ih || s < 0 || s >= c.iw) continue;
              out[static_cast<size_t>((o * oh + y) * ow + x)].add(
                  half(c.input, (ch * c.ih + r) * c.iw + s),
                  half(c.weight, ((o * per + wc) * c.kh + i) * c.kw + j));
            }
          }
        }
      }
    }
  }
  return out;
}

std::vector<Exact> conv_transpose2d_definition(const Fp16ConvTranspose2d& c) {
  const int64_t oh = conv_transpose2d_output_height(c), ow = conv_transpose2d_output_width(c);
  std::vector<Exact> out(static_cast<size_t>(c.oc * oh * ow));
  for (int64_t ch = 0; ch < c.ic; ++ch) {
    for (int64_t r = 0; r < c.ih; ++r) {
      for (int64_t s = 0; s < c.iw; ++s) {
        for (int64_t o = 0; o < c.oc; ++o) {
          if (c.depthwise && o != ch) continue;
          const int64_t wo = c.depthwise ? 0 : o, per = c.depthwise ? 1 : c.oc;
          for (int64_t i = 0; i < c.kh; ++i) {
            for (int64_t j = 0; j < c.kw; ++j) {
              const int64_t y = r * c.stride_y - c.pad_top + i * c.dil_y;
              const int64_t x = s * c.stride_x - c.pad_left + j * c.dil_x;
              if (y < 0 || y >= oh || x < 0 || x >= ow) continue;
              out[static_cast<size_t>((o * oh + y) * ow + x)].add(
                  half(c.input, (ch * c.ih + r) * c.iw + s),
                  half(c.weight, ((ch * per + wo) * c.kh + i) * c.kw + j));
            }
          }
        }
      }
    }
  }
  return out;
}

// The worst excess over the bound: one fp16 ulp of the value (half for the final rounding, the
// rest for the fp32 sum, whose error is within K x 2^-24 of the terms' magnitudes). <= 0: within.
double worst_excess(const std::vector<uint16_t>& got, const std::vector<Exact>& want) {
  double worst = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    const double value = half_bits_to_float(got[i]);
    const double bound = std::abs(want[i].value) * std::ldexp(1.0, -10) + std::ldexp(1.0, -24) +
                         want[i].magnitude * std::ldexp(1.0, -20);
    worst = std::max(worst, std::isnan(value) ? 1.0 : std::abs(value - want[i].value) - bound);
  }
  return worst;
}

// Convolution is optional: a device that offers it is within one fp16 ulp of the definition
// over a grid of kernels (square and not), strides, pads, dilations and channel counts, direct,
// depthwise and transposed, and bit-identical to the host reference where it is the simulator
// (the library claims bit-exactness with that reference); one that does not refuses with
// kUnsupported. The simulator, as the bare library, refuses a direct OC % 16; the rocket adapter
// pads it.
TEST_P(Conformance, ConvolutionIsWithinTheFp16BoundOrRefused) {
  HostDevice host{DeviceOptions{}};
  const bool simulated = GetParam() == "sim" || GetParam() == "rocket_sim";
  std::optional<bool> offered;
  // Runs one call on the device and the host; false when the device does not offer convolution.
  auto check = [&](auto call, auto& operands_of, auto run, auto definition, bool device_takes) {
    uint32_t seed = 7;
    ConvOperands on_device = operands_of(call, seed);
    const Status status = run(*device_, call);
    if (!offered) offered = status.is_ok() || !device_takes;
    if (!*offered || (GetParam() == "rocket_board" && !status.is_ok())) {
      ASSERT_EQ(status.code(), StatusCode::kUnsupported) << status.to_string();
      return;
    }
    if (!device_takes) {
      EXPECT_EQ(status.code(), StatusCode::kUnsupported) << status.to_string();
      return;
    }
    ASSERT_TRUE(status.is_ok()) << status.to_string();
    EXPECT_LE(worst_excess(on_device.out, definition(call)), 0.0);
    if (simulated) {
      auto on_host_call = call;
      ConvOperands on_host = operands_of(on_host_call, seed);
      ASSERT_TRUE(run(host, on_host_call).is_ok());
      EXPECT_EQ(on_device.out, on_host.out);
    }
  };
  const auto run_conv2d = [](Device& device, const Fp16Conv2d& call) {
    return device.conv2d_fp16(call, {});
  };
  const auto run_transposed = [](Device& device, const Fp16ConvTranspose2d& call) {
    return device.conv_transpose2d_fp16(call, {});
  };
  const std::pair<int64_t, int64_t> kernels[] = {{1, 1}, {3, 3}, {7, 7}, {3, 1}, {1, 5}};
  const std::pair<int64_t, int64_t> strides[] = {{1, 1}, {2, 2}, {2, 1}};
  const int64_t ics[] = {3, 16, 33}, ocs[] = {16, 32, 20};
  int index = 0;
  for (auto [kh, kw] : kernels) {
    for (auto [sy, sx] : strides) {
      for (int64_t pad : {0, 1, 3}) {
        for (int64_t dil : {1, 2}) {
          Fp16Conv2d call{.ic = ics[index % 3],
                          .ih = 11,
                          .iw = 13,
                          .oc = ocs[index / 3 % 3],
                          .kh = kh,
                          .kw = kw,
                          .stride_y = sy,
                          .stride_x = sx,
                          .pad_top = std::min(pad, kh / 2 * dil),
                          .pad_left = std::min(pad, kw / 2 * dil),
                          .dil_y = dil,
                          .dil_x = dil};
          ++index;
          if (conv2d_output_height(call) < 1 || conv2d_output_width(call) < 1) continue;
          SCOPED_TRACE(str_cat("conv2d ic=", call.ic, " oc=", call.oc, " kernel ", kh, "x", kw,
                               " stride ", sy, "x", sx, " pad ", call.pad_top, ",", call.pad_left,
                               " dil ", dil));
          check(call, conv2d_operands, run_conv2d, conv2d_definition,
                GetParam() != "sim" || call.oc % 16 == 0);
          // Its depthwise form at 32, 64 and 20 channels (20: the rocket adapter pads it to the
          // channel group; the bare simulator refuses).
          Fp16Conv2d depthwise = call;
          depthwise.depthwise = true;
          depthwise.ic = depthwise.oc = std::array<int64_t, 3>{32, 64, 20}[index % 3];
          check(depthwise, conv2d_operands, run_conv2d, conv2d_definition,
                GetParam() != "sim" || depthwise.ic % 32 == 0);
        }
      }
    }
  }
  for (auto [kh, kw] : {std::pair<int64_t, int64_t>{2, 2}, {3, 3}, {4, 4}, {3, 1}}) {
    for (int64_t stride : {1, 2}) {
      for (int64_t opad : {0, 1}) {
        for (int64_t dil : {1, 2}) {
          if (opad >= stride) continue;
          Fp16ConvTranspose2d call{.ic = ics[index % 3],
                                   .ih = 5,
                                   .iw = 6,
                                   .oc = ocs[index / 3 % 3],
                                   .kh = kh,
                                   .kw = kw,
                                   .stride_y = stride,
                                   .stride_x = stride,
                                   .pad_top = std::min<int64_t>(1, dil * (kh - 1)),
                                   .pad_left = std::min<int64_t>(1, dil * (kw - 1)),
                                   .opad_y = opad,
                                   .opad_x = opad,
                                   .dil_y = dil,
                                   .dil_x = dil};
          ++index;
          SCOPED_TRACE(str_cat("conv_transpose2d ic=", call.ic, " oc=", call.oc, " kernel ", kh,
                               "x", kw, " stride ", stride, " opad ", opad, " dil ", dil));
          check(call, conv_transpose2d_operands, run_transposed, conv_transpose2d_definition, true);
          Fp16ConvTranspose2d depthwise = call;
          depthwise.depthwise = true;
          depthwise.ic = depthwise.oc = index % 2 == 0 ? 32 : 12;
          check(depthwise, conv_transpose2d_operands, run_transposed, conv_transpose2d_definition,
                GetParam() != "sim" || depthwise.ic % 32 == 0);
        }
      }
    }
  }
  // The host is every primitive's reference and librocketnpu-sim has both convolutions; only a
  // board's library may lack them.
  if (GetParam() != "rocket_board") {
    EXPECT_TRUE(*offered) << GetParam() << " must offer convolution";
  }
}

// Calls no device can take are invalid arguments; shapes outside the library's contract
// (a transposed pad beyond the dilated kernel, and on the bare simulator a direct OC % 16 and a
// depthwise C % 32, which the rocket adapter pads) are refused by the NPU devices and computed by
// the host.
TEST_P(Conformance, ConvolutionRefusesOutsideItsContract) {
  Fp16Conv2d probe{.ic = 16, .ih = 6, .iw = 6, .oc = 16, .kh = 3, .kw = 3};
  ConvOperands probe_operands = conv2d_operands(probe, 3);
  const Status offered = device_->conv2d_fp16(probe, {});
  if (!offered.is_ok() && GetParam() == "rocket_board") GTEST_SKIP() << offered.to_string();
  ASSERT_TRUE(offered.is_ok()) << offered.to_string();

  auto invalid = [&](auto mutate) {
    Fp16Conv2d call = probe;
    mutate(call);
    return device_->conv2d_fp16(call, {}).code();
  };
  EXPECT_EQ(invalid([](Fp16Conv2d& c) { c.ic = 0; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(invalid([](Fp16Conv2d& c) { c.weight = nullptr; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(invalid([](Fp16Conv2d& c) { c.stride_x = 0; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(invalid([](Fp16Conv2d& c) { c.pad_top = -1; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(invalid([](Fp16Conv2d& c) { c.kh = 9; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(invalid([](Fp16Conv2d& c) { c.depthwise = true, c.oc = 32; }),
            StatusCode::kInvalidArgument);
  Fp16ConvTranspose2d transposed{
      .ic = 16, .ih = 4, .iw = 4, .oc = 16, .kh = 3, .kw = 3, .stride_y = 2, .stride_x = 2};
  ConvOperands transposed_operands = conv_transpose2d_operands(transposed, 4);
  ASSERT_TRUE(device_->conv_transpose2d_fp16(transposed, {}).is_ok());
  Fp16ConvTranspose2d wide_opad = transposed;
  wide_opad.opad_x = 2;
  EXPECT_EQ(device_->conv_transpose2d_fp16(wide_opad, {}).code(), StatusCode::kInvalidArgument);

  const bool host = GetParam() == "host";
  const auto expect = [&](const Status& status, bool accepted) {
    if (accepted) {
      EXPECT_TRUE(status.is_ok()) << status.to_string();
    } else {
      EXPECT_EQ(status.code(), StatusCode::kUnsupported) << status.to_string();
    }
  };
  // OC 20: the adapter pads the filters; the bare simulator refuses.
  Fp16Conv2d narrow = probe;
  narrow.oc = 20;
  ConvOperands narrow_operands = conv2d_operands(narrow, 5);
  expect(device_->conv2d_fp16(narrow, {}), GetParam() != "sim");
  Fp16Conv2d depthwise = probe;
  depthwise.depthwise = true;
  ConvOperands depthwise_operands = conv2d_operands(depthwise, 6);
  expect(device_->conv2d_fp16(depthwise, {}), GetParam() != "sim");
  Fp16ConvTranspose2d cropping = transposed;
  cropping.pad_top = 3;
  ConvOperands cropping_operands = conv_transpose2d_operands(cropping, 7);
  expect(device_->conv_transpose2d_fp16(cropping, {}), host);
}

INSTANTIATE_TEST_SUITE_P(Devices, Conformance,
                         ::testing::Values("host", "sim", "rocket_sim", "rocket_board"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace npuflow
