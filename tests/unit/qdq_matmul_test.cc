// The fused QDQ kernel: routing by rows, uint8 weights, recovered activations, device fallback.
#include "quant/qdq_matmul.h"

#include <gtest/gtest.h>

#include <random>

#include "host/host_device.h"
#include "sim/sim_device.h"

namespace npuflow {
namespace {

// A device that refuses every call, as a board would outside its contract.
class RefusingDevice final : public Device {
 public:
  std::string_view name() const override { return "refusing"; }
  std::string description() const override { return "refuses everything"; }
  Result<std::unique_ptr<PackedWeight>> pack_int8_weight(const int8_t* w, int64_t k,
                                                         int64_t n) override {
    return host_.pack_int8_weight(w, k, n);
  }
  Status gemm_int8(const void*, ElementType, int64_t, const PackedWeight&, int32_t*,
                   const ExecContext&) override {
    return unsupported("injected refusal");
  }
  Result<std::unique_ptr<PackedWeight>> pack_float_weight(const float* w, int64_t k,
                                                          int64_t n) override {
    return host_.pack_float_weight(w, k, n);
  }
  Status gemm_float(const float*, int64_t, const PackedWeight&, float*,
                    const ExecContext&) override {
    return unsupported("injected refusal");
  }

 private:
  HostDevice host_{{}};
};

QdqGemmSpec make_spec(int64_t k, int64_t n) {
  QdqGemmSpec spec;
  spec.k = k;
  spec.n = n;
  spec.x_scale = 0.02f;
  spec.x_zero_point = -40;
  spec.w_scales.assign(n, 0.0f);
  spec.w_zero_points.assign(n, 0);
  for (int64_t j = 0; j < n; ++j) {
    spec.w_scales[j] = 0.001f * static_cast<float>(j + 1);
    spec.w_zero_points[j] = static_cast<int32_t>(j % 7) - 3;
  }
  spec.output = QuantizedOutput{0.5f, -7, ElementType::kInt8};
  return spec;
}

struct Fixture {
  int64_t k = 64, n = 32;
  std::vector<int8_t> weight;
  std::vector<int8_t> activations;
  Logger logger{LogLevel::kError, [](LogLevel, const std::string&) {}};
  Fixture() {
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> i8(-128, 127);
    weight.resize(k * n);
    for (auto& v : weight) v = static_cast<int8_t>(i8(rng));
    activations.resize(64 * k);
    for (auto& v : activations) v = static_cast<int8_t>(i8(rng));
  }
};

TEST(QdqMatMul, RoutesByRowsAndBothRoutesAgree) {
  Fixture f;
  auto device = std::make_shared<HostDevice>(DeviceOptions{});
  auto kernel = QdqMatMul::create("t", make_spec(f.k, f.n), f.weight.data(), ElementType::kInt8,
                                  device, 16, f.logger);
  ASSERT_TRUE(kernel.is_ok()) << kernel.status().to_string();
  auto always_host = QdqMatMul::create("h", make_spec(f.k, f.n), f.weight.data(),
                                       ElementType::kInt8, device, 1000, f.logger);
  ASSERT_TRUE(always_host.is_ok());
  for (int64_t m : {1, 15, 16, 64}) {
    std::vector<int8_t> a(f.activations.begin(), f.activations.begin() + m * f.k);
    std::vector<int8_t> y(m * f.n), y_host(m * f.n);
    ASSERT_TRUE(kernel.value()->run(a.data(), ElementType::kInt8, m, y.data(), {}).is_ok());
    ASSERT_TRUE(
        always_host.value()->run(a.data(), ElementType::kInt8, m, y_host.data(), {}).is_ok());
    EXPECT_EQ(y, y_host) << "m=" << m;
  }
  EXPECT_EQ(kernel.value()->counters().host_row_calls.load(), 2);  // m = 1 and 15
  EXPECT_EQ(kernel.value()->counters().device_calls.load(), 2);    // m = 16 and 64
  EXPECT_EQ(always_host.value()->counters().device_calls.load(), 0);
}

TEST(QdqMatMul, Uint8WeightsEqualTheirShiftedInt8Form) {
  Fixture f;
  auto device = std::make_shared<HostDevice>(DeviceOptions{});
  std::vector<uint8_t> w_u8(f.weight.size());
  for (size_t i = 0; i < w_u8.size(); ++i) w_u8[i] = static_cast<uint8_t>(f.weight[i] + 128);
  QdqGemmSpec spec_u8 = make_spec(f.k, f.n);
  for (auto& zp : spec_u8.w_zero_points) zp += 128;
  auto from_u8 =
      QdqMatMul::create("u8", spec_u8, w_u8.data(), ElementType::kUInt8, device, 1, f.logger);
  auto from_s8 = QdqMatMul::create("s8", make_spec(f.k, f.n), f.weight.data(), ElementType::kInt8,
                                   device, 1, f.logger);
  ASSERT_TRUE(from_u8.is_ok() && from_s8.is_ok());
  std::vector<int8_t> y1(32 * f.n), y2(32 * f.n);
  ASSERT_TRUE(
      from_u8.value()->run(f.activations.data(), ElementType::kInt8, 32, y1.data(), {}).is_ok());
  ASSERT_TRUE(
      from_s8.value()->run(f.activations.data(), ElementType::kInt8, 32, y2.data(), {}).is_ok());
  EXPECT_EQ(y1, y2);
}

TEST(QdqMatMul, DequantizedActivationsAreRecoveredExactly) {
  Fixture f;
  auto device = std::make_shared<HostDevice>(DeviceOptions{});
  const QdqGemmSpec spec = make_spec(f.k, f.n);
  auto kernel =
      QdqMatMul::create("t", spec, f.weight.data(), ElementType::kInt8, device, 16, f.logger);
  ASSERT_TRUE(kernel.is_ok());
  const int64_t m = 20;
  std::vector<float> dequantized(m * f.k);
  for (int64_t i = 0; i < m * f.k; ++i) {
    // What ONNX Runtime's DequantizeLinear computes, in float.
    dequantized[i] = static_cast<float>(f.activations[i] - spec.x_zero_point) * spec.x_scale;
  }
  std::vector<int8_t> y(m * f.n), y_ref(m * f.n);
  ASSERT_TRUE(kernel.value()
                  ->run_from_dequantized(dequantized.data(), ElementType::kInt8, m, y.data(), {})
                  .is_ok());
  ASSERT_TRUE(
      kernel.value()->run(f.activations.data(), ElementType::kInt8, m, y_ref.data(), {}).is_ok());
  EXPECT_EQ(y, y_ref);
  dequantized[3] = std::nanf("");
  EXPECT_EQ(kernel.value()
                ->run_from_dequantized(dequantized.data(), ElementType::kInt8, m, y.data(), {})
                .code(),
            StatusCode::kInvalidArgument);
}

TEST(QdqMatMul, RefusedDeviceCallsFallBackWithTheSameResult) {
  Fixture f;
  std::vector<std::string> warnings;
  Logger logger(LogLevel::kWarning, [&](LogLevel, const std::string& m) { warnings.push_back(m); });
  auto refusing = QdqMatMul::create("r", make_spec(f.k, f.n), f.weight.data(), ElementType::kInt8,
                                    std::make_shared<RefusingDevice>(), 16, logger);
  auto host = QdqMatMul::create("h", make_spec(f.k, f.n), f.weight.data(), ElementType::kInt8,
                                std::make_shared<HostDevice>(DeviceOptions{}), 16, logger);
  ASSERT_TRUE(refusing.is_ok() && host.is_ok());
  std::vector<int8_t> y1(64 * f.n), y2(64 * f.n);
  for (int call = 0; call < 3; ++call) {
    ASSERT_TRUE(
        refusing.value()->run(f.activations.data(), ElementType::kInt8, 64, y1.data(), {}).is_ok());
  }
  ASSERT_TRUE(
      host.value()->run(f.activations.data(), ElementType::kInt8, 64, y2.data(), {}).is_ok());
  EXPECT_EQ(y1, y2);
  EXPECT_EQ(refusing.value()->counters().fallback_calls.load(), 3);
  ASSERT_EQ(warnings.size(), 1u);  // logged once per node, not per call
  EXPECT_NE(warnings[0].find("npu_qdq_fallback"), std::string::npos);
}

// A device whose pack refuses the weight as an invalid argument (the sim's answer to an empty
// shape): the group must still run, on the host loop, rather than fail the session.
class PackRefusingDevice final : public Device {
 public:
  std::string_view name() const override { return "pack-refusing"; }
  std::string description() const override { return "refuses every pack"; }
  Result<std::unique_ptr<PackedWeight>> pack_int8_weight(const int8_t*, int64_t k,
                                                         int64_t n) override {
    return invalid_argument("weight shape " + std::to_string(k) + "x" + std::to_string(n) +
                            " refused");
  }
  Status gemm_int8(const void*, ElementType, int64_t, const PackedWeight&, int32_t*,
                   const ExecContext&) override {
    return internal_error("never called: nothing was packed");
  }
  Result<std::unique_ptr<PackedWeight>> pack_float_weight(const float*, int64_t, int64_t) override {
    return unsupported("no float");
  }
  Status gemm_float(const float*, int64_t, const PackedWeight&, float*,
                    const ExecContext&) override {
    return unsupported("no float");
  }
};

TEST(QdqMatMul, AnyPackRefusalFallsBackToTheHostLoop) {
  Fixture f;
  std::vector<std::string> warnings;
  Logger logger(LogLevel::kWarning, [&](LogLevel, const std::string& m) { warnings.push_back(m); });
  auto refused = QdqMatMul::create("p", make_spec(f.k, f.n), f.weight.data(), ElementType::kInt8,
                                   std::make_shared<PackRefusingDevice>(), 16, logger);
  ASSERT_TRUE(refused.is_ok()) << refused.status().to_string();
  EXPECT_FALSE(refused.value()->on_device());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("npu_qdq_pack_fallback"), std::string::npos) << warnings[0];
  // The reference: the host integer loop by route (min_rows above the call's rows).
  auto host = QdqMatMul::create("h", make_spec(f.k, f.n), f.weight.data(), ElementType::kInt8,
                                std::make_shared<HostDevice>(DeviceOptions{}), 1000, f.logger);
  ASSERT_TRUE(host.is_ok());
  std::vector<int8_t> y1(64 * f.n), y2(64 * f.n);
  ASSERT_TRUE(
      refused.value()->run(f.activations.data(), ElementType::kInt8, 64, y1.data(), {}).is_ok());
  EXPECT_EQ(refused.value()->counters().fallback_calls.load(), 1);
  ASSERT_TRUE(
      host.value()->run(f.activations.data(), ElementType::kInt8, 64, y2.data(), {}).is_ok());
  EXPECT_EQ(y1, y2);
  EXPECT_EQ(warnings.size(), 1u);  // the fallback was said once, at create
}

// The simulator refuses an empty weight at pack time; the group runs (and writes nothing).
TEST(QdqMatMul, AnEmptyWeightTheSimRefusesStillRuns) {
  Fixture f;
  auto sim = std::make_shared<sim::SimDevice>(sim::SimOptions{});
  auto kernel = QdqMatMul::create("n0", make_spec(f.k, 0), f.weight.data(), ElementType::kInt8, sim,
                                  16, f.logger);
  ASSERT_TRUE(kernel.is_ok()) << kernel.status().to_string();
  std::vector<int8_t> y(1);
  EXPECT_TRUE(
      kernel.value()->run(f.activations.data(), ElementType::kInt8, 32, y.data(), {}).is_ok());
}

// Scales and zero points that fit neither per-tensor nor per-column are a bad spec, not a crash.
TEST(QdqMatMul, RefusesScaleCountsThatFitNoColumnLayout) {
  Fixture f;
  for (size_t count : {size_t{0}, size_t{5}}) {
    QdqGemmSpec spec = make_spec(f.k, f.n);
    spec.w_scales.assign(count, 0.01f);
    spec.w_zero_points.assign(count, 0);
    auto kernel = QdqMatMul::create("bad", spec, f.weight.data(), ElementType::kInt8,
                                    std::make_shared<HostDevice>(DeviceOptions{}), 16, f.logger);
    EXPECT_EQ(kernel.status().code(), StatusCode::kInvalidArgument) << count;
  }
}

}  // namespace
}  // namespace npuflow
