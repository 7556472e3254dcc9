// The cost model reproduces the upstream figures it was built from (rk3588-npu.md §3), within
// the tolerance each test states, and stays within a wider, stated tolerance on measurements it
// was not fitted to. These are arithmetic checks on the model; nothing here measures time.
#include "sim/cost_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "sim/board_cpu_model.h"

namespace npuflow::sim {
namespace {

CostQuery shape(NpuType type, int64_t m, int64_t k, int64_t n, int workers) {
  CostQuery q;
  q.type = type;
  q.m = m;
  q.k = k;
  q.n = n;
  q.workers = workers;
  return q;
}

// Both tables: the NPU's and the board CPU's. A fitted constant (F) names the validation row it
// was fitted on (docs/simulator.md), which then does not count as evidence.
TEST(CostModel, EveryConstantHasASourceAndATag) {
  std::set<std::string> names;
  for (std::span<const CostConstant> table : {cost_constants(), board_cpu_constants()}) {
    for (const CostConstant& c : table) {
      EXPECT_TRUE(names.insert(c.name).second) << "duplicate " << c.name;
      EXPECT_NE(std::string("MDUCAF").find(c.tag), std::string::npos) << c.name;
      EXPECT_GT(c.value, 0.0) << c.name;
      const std::string source = c.source;
      const bool fitted = source.rfind("fitted: seed ", 0) == 0;
      EXPECT_EQ(fitted, c.tag == 'F') << c.name << ": " << source;
      EXPECT_TRUE(source.find("rk3588-npu.md") != std::string::npos ||
                  source.rfind("assumption", 0) == 0 || fitted)
          << c.name << ": " << source;
    }
  }
  EXPECT_THROW(cost_constant("no_such_constant"), std::logic_error);
  EXPECT_THROW(board_cpu_constant("no_such_constant"), std::logic_error);
  EXPECT_FALSE(override_constant("no_such_constant", 1.0));
}

TEST(CostModel, ReproducesTheResidentThroughputOnTheCalibrationShape) {
  // 512 x 3840 x 4096, resident, 5 fds: fp16 461, int8 386, int4 413 GOP/s, within 1 %.
  const struct {
    NpuType type;
    double gops;
  } figures[] = {{NpuType::kFp16, 461}, {NpuType::kInt8, 386}, {NpuType::kInt4, 413}};
  for (const auto& f : figures) {
    const CostEstimate e = CostModel::npu(shape(f.type, 512, 3840, 4096, 5));
    EXPECT_NEAR(e.gops(), f.gops, 0.01 * f.gops) << npu_type_name(f.type);
    EXPECT_GT(e.host_us, 0.0);
    EXPECT_GT(e.jobs, 0);
  }
}

TEST(CostModel, ReproducesTheSubmitFloor) {
  // A tiny one-task job costs the submit+wait floor: 34 us patched, 51-54 us stock (within 5 %).
  CostQuery tiny = shape(NpuType::kInt8, 4, 32, 32, 1);
  const CostEstimate patched = CostModel::npu(tiny);
  EXPECT_EQ(patched.tiles, 1);
  EXPECT_NEAR(patched.device_us, 34.0, 0.05 * 34.0);
  tiny.patched_kernel = false;
  const double stock = CostModel::npu(tiny).device_us;
  EXPECT_GE(stock, 51.0 * 0.95);
  EXPECT_LE(stock, 54.0 * 1.05);
}

TEST(CostModel, ReproducesMultiFdScaling) {
  // Threads 1/2/3 on one fd each: 1.0 / 2.13 / 2.94x, within 3 % on a large compute-bound call.
  auto device_us = [](int workers) {
    return CostModel::npu(shape(NpuType::kFp16, 2048, 4096, 3072, workers)).device_us;
  };
  const double one = device_us(1);
  EXPECT_NEAR(one / device_us(2), 2.13, 0.03 * 2.13);
  EXPECT_NEAR(one / device_us(3), 2.94, 0.03 * 2.94);
  EXPECT_LT(device_us(5), device_us(3));  // a 4th and 5th fd still fill gaps, a little
}

TEST(CostModel, ReproducesTheAttentionPenaltyAndTheGemvSlowdown) {
  CostQuery q = shape(NpuType::kFp16, 512, 64, 512, 5);
  const double projection = CostModel::npu(q).device_us;
  q.kind = GemmKind::kAttentionScore;
  const double score = CostModel::npu(q).device_us;
  const double floor = CostModel::npu(q).serial_jobs * cost_constant("submit_wait_floor_us");
  EXPECT_NEAR((score - floor) / (projection - floor), 2.7, 0.01 * 2.7);
  // M = 1: ~82x the modelled CPU time for the same GEMV.
  const CostEstimate gemv = CostModel::npu(shape(NpuType::kFp16, 1, 4096, 4096, 5));
  EXPECT_TRUE(gemv.gemv);
  EXPECT_NEAR(gemv.total_us() / CostModel::cpu_us(NpuType::kFp16, 1, 4096, 4096), 82.0, 0.82);
}

TEST(CostModel, StaysNearSingleFdMeasurementsItWasNotFittedTo) {
  // Single fd, 512 x 3840 x 4096 fp16, weight not resident [M]: pack 36 ms (B 32), wait 84 ms,
  // read 10 ms. The model is fitted on 5 fds only; it must land within 20 %.
  CostQuery q = shape(NpuType::kFp16, 512, 3840, 4096, 1);
  q.resident = false;
  const CostEstimate e = CostModel::npu(q);
  EXPECT_NEAR(e.device_us / 1e3, 84.0, 0.20 * 84.0);
  EXPECT_NEAR(e.total_us() / 1e3, 130.0, 0.20 * 130.0);
  const double weight_pack_ms = 3840.0 * 4096 * 2 / (cost_constant("pack_gbps") * 1e6);
  EXPECT_NEAR(weight_pack_ms, 32.0, 0.20 * 32.0);
}

TEST(CostModel, DescribeListsDerivedRates) {
  const std::string text = CostModel::describe();
  EXPECT_NE(text.find("core_gops_fp16"), std::string::npos);
  EXPECT_NE(text.find("[M]"), std::string::npos);
  for (NpuType t : {NpuType::kFp16, NpuType::kInt8, NpuType::kInt4}) {
    EXPECT_GT(CostModel::core_gops(t), 0.0);
  }
}

}  // namespace
}  // namespace npuflow::sim
