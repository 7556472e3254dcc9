// The one fallback path (ops/device_fallback.h) and the device row padding (ops/device_rows.h).
#include "ops/device_fallback.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/strings.h"
#include "ops/device_rows.h"
#include "sim/sim_device.h"

namespace npuflow {
namespace {

TEST(DeviceFallback, RerunsOnTheHostCountsEachAndSaysSoOnce) {
  std::vector<std::string> warnings;
  const Logger logger(LogLevel::kWarning,
                      [&](LogLevel, const std::string& message) { warnings.push_back(message); });
  DeviceFallback fallback;
  std::atomic<int64_t> fallbacks{0};
  int device_runs = 0, host_runs = 0;
  auto run = [&](Status device_status) {
    return fallback.run(
        [&] {
          device_runs++;
          return device_status;
        },
        [&] {
          host_runs++;
          return Status::ok();
        },
        fallbacks, logger, [](const Status& s) { return str_cat("fell back: ", s.message()); });
  };
  EXPECT_TRUE(run(Status::ok()).is_ok());
  EXPECT_EQ(host_runs, 0);
  EXPECT_TRUE(run(unsupported("ROCKET_E_SHAPE")).is_ok());
  EXPECT_TRUE(run(Status(StatusCode::kDeviceFailure, "ROCKET_E_DEVICE")).is_ok());
  EXPECT_EQ(device_runs, 3);
  EXPECT_EQ(host_runs, 2);
  EXPECT_EQ(fallbacks.load(), 2);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings.front(), "fell back: ROCKET_E_SHAPE");
}

TEST(DeviceFallback, AFallbackSaidAtPackIsNotSaidAgain) {
  int warnings = 0;
  const Logger logger(LogLevel::kWarning, [&](LogLevel, const std::string&) { warnings++; });
  DeviceFallback fallback;
  fallback.mark_logged();
  std::atomic<int64_t> fallbacks{0};
  const Status status = fallback.run([] { return unsupported("no"); },
                                     [] { return invalid_argument("host says no"); }, fallbacks,
                                     logger, [](const Status&) { return std::string("x"); });
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);  // the host's verdict stands
  EXPECT_EQ(warnings, 0);
  EXPECT_EQ(fallbacks.load(), 1);
}

TEST(DeviceRows, PadsToTheDevicesMultipleAndHandsOnlyRealRowsToTheSink) {
  sim::SimDevice sim;  // row multiple 4
  const int64_t k = 32, n = 32, m = 5;
  std::vector<int8_t> w(static_cast<size_t>(k * n), 1), a(static_cast<size_t>(m * k), 2);
  auto packed = sim.pack_int8_weight(w.data(), k, n);
  ASSERT_TRUE(packed.is_ok());
  std::vector<uint8_t> scratch;
  const DeviceRows rows =
      pad_to_device_rows(sim, ElementType::kInt8, a.data(), m, static_cast<size_t>(k), scratch);
  EXPECT_EQ(rows.rows, 8);
  EXPECT_TRUE(rows.padded);
  EXPECT_EQ(static_cast<const int8_t*>(rows.data)[m * k], 0);
  int64_t last_row = -1;
  const Status status = gemm_int8_real_rows(sim, rows, ElementType::kInt8, m, *packed.value(),
                                            [&](int64_t row, int64_t, int64_t block_rows,
                                                int64_t cols, const int32_t* block, int64_t ld) {
                                              last_row = std::max(last_row, row + block_rows - 1);
                                              for (int64_t r = 0; r < block_rows; ++r) {
                                                for (int64_t c = 0; c < cols; ++c)
                                                  EXPECT_EQ(block[r * ld + c], 2 * k);
                                              }
                                            },
                                            {});
  ASSERT_TRUE(status.is_ok()) << status.to_string();
  EXPECT_EQ(last_row, m - 1);
  const DeviceRows aligned =
      pad_to_device_rows(sim, ElementType::kInt8, a.data(), 4, static_cast<size_t>(k), scratch);
  EXPECT_FALSE(aligned.padded);
  EXPECT_EQ(aligned.data, a.data());
}

}  // namespace
}  // namespace npuflow
