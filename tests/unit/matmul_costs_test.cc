// The ggml backend's MUL_MAT cost table: row buckets, the file round trip over random rows, and
// that a table of another identity, a broken file or an invalid row is never read as a
// measurement.
#include "route/matmul_costs.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

namespace npuflow {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          (name + "-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
           std::to_string(getpid()) + ".json"))
      .string();
}

TEST(MatmulCosts, RowsAreBucketedToTheNearestPowerOfTwo) {
  EXPECT_EQ(cost_rows_bucket(1), 1);
  EXPECT_EQ(cost_rows_bucket(128), 128);
  EXPECT_EQ(cost_rows_bucket(181), 128);  // 181 < 128 * sqrt(2)
  EXPECT_EQ(cost_rows_bucket(182), 256);
  EXPECT_EQ(cost_rows_bucket(252), 256);
  EXPECT_EQ(cost_rows_bucket(512), 512);
  EXPECT_EQ(cost_rows_bucket(700), 512);
  std::mt19937 rng(7);
  for (int i = 0; i < 1000; ++i) {
    const int64_t m = std::uniform_int_distribution<int64_t>(2, 1 << 20)(rng);
    const int64_t b = cost_rows_bucket(m);
    EXPECT_EQ(b & (b - 1), 0) << m;
    EXPECT_LE(std::abs(std::log2(static_cast<double>(m) / b)), 0.5 + 1e-9) << m;
  }
}

TEST(MatmulCosts, RandomRowsRoundTripThroughTheFile) {
  const std::string path = temp_path("costs-roundtrip");
  std::mt19937 rng(11);
  const char* types[] = {"f32", "f16", "q8_0", "q4_1", "q4_K", "q6_K"};
  std::map<MatmulCostKey, MatmulCost> written;
  {
    MatmulCostTable table(path, "identity A");
    EXPECT_TRUE(table.load().has_value()) << "no file yet";
    for (int i = 0; i < 40; ++i) {
      MatmulCostKey key{types[rng() % 6], 32 * (1 + static_cast<int64_t>(rng() % 64)),
                        16 * (1 + static_cast<int64_t>(rng() % 256)),
                        cost_rows_bucket(128 + rng() % 4096), 1 + static_cast<int>(rng() % 4)};
      MatmulCost cost{0.01 + (rng() % 100000) / 1000.0, 0.01 + (rng() % 100000) / 1000.0,
                      3 + static_cast<int>(rng() % 7)};
      ASSERT_TRUE(table.record(key, cost).is_ok());
      written[key] = cost;
    }
  }
  MatmulCostTable again(path, "identity A");
  ASSERT_FALSE(again.load().has_value());
  EXPECT_EQ(again.size(), written.size());
  for (const auto& [key, cost] : written) {
    const MatmulCost* read = again.find(key);
    ASSERT_NE(read, nullptr) << describe(key);
    EXPECT_NEAR(read->npuflow_ms, cost.npuflow_ms, 1e-5 * cost.npuflow_ms);
    EXPECT_NEAR(read->cpu_ms, cost.cpu_ms, 1e-5 * cost.cpu_ms);
    EXPECT_EQ(read->rounds, cost.rounds);
    EXPECT_EQ(read->npuflow_not_slower(), cost.npuflow_not_slower());
  }
  MatmulCostKey absent = written.begin()->first;
  absent.threads += 10;
  EXPECT_EQ(again.find(absent), nullptr) << "another thread count is another measurement";
  std::filesystem::remove(path);
}

TEST(MatmulCosts, AnotherIdentityIsMeasuredAnewAndReplaced) {
  const std::string path = temp_path("costs-identity");
  const MatmulCostKey key{"q4_K", 576, 1536, 512, 2};
  {
    MatmulCostTable old_build(path, "machine X, build 1");
    ASSERT_TRUE(old_build.record(key, {1.0, 9.0, 3}).is_ok());
  }
  MatmulCostTable new_build(path, "machine X, build 2");
  const auto why = new_build.load();
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("another machine or build"), std::string::npos) << *why;
  EXPECT_EQ(new_build.find(key), nullptr);
  // Recording under the new identity replaces the old rows instead of merging them in.
  ASSERT_TRUE(new_build.record(key, {5.0, 2.0, 3}).is_ok());
  MatmulCostTable reread(path, "machine X, build 2");
  ASSERT_FALSE(reread.load().has_value());
  ASSERT_NE(reread.find(key), nullptr);
  EXPECT_DOUBLE_EQ(reread.find(key)->npuflow_ms, 5.0);
  EXPECT_FALSE(reread.find(key)->npuflow_not_slower());
  std::filesystem::remove(path);
}

TEST(MatmulCosts, ConcurrentWritersOfOneIdentityKeepEachOthersRows) {
  const std::string path = temp_path("costs-merge");
  MatmulCostTable a(path, "id"), b(path, "id");
  a.load();
  b.load();
  ASSERT_TRUE(a.record({"q8_0", 1024, 1024, 512, 2}, {1, 2, 3}).is_ok());
  ASSERT_TRUE(b.record({"q4_1", 1024, 1024, 512, 2}, {2, 1, 3}).is_ok());
  MatmulCostTable c(path, "id");
  ASSERT_FALSE(c.load().has_value());
  EXPECT_EQ(c.size(), 2u);
  std::filesystem::remove(path);
}

TEST(MatmulCosts, BrokenFilesAndInvalidRowsAreNotMeasurements) {
  const std::string path = temp_path("costs-broken");
  { std::ofstream(path) << "{\"identity\":\"id\",\"rows\":[{\"weight\":\"q4_1\""; }
  MatmulCostTable broken(path, "id");
  const auto why = broken.load();
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("does not parse"), std::string::npos) << *why;
  {
    std::ofstream(path) << "{\"identity\":\"id\",\"rows\":["
                           "{\"weight\":\"q4_1\",\"k\":576,\"n\":576,\"rows\":512,\"threads\":2,"
                           "\"npuflow_ms\":0,\"cpu_ms\":1,\"rounds\":3},"
                           "{\"weight\":\"q4_1\",\"k\":576,\"n\":1536,\"rows\":512,\"threads\":2,"
                           "\"npuflow_ms\":-1,\"cpu_ms\":1,\"rounds\":3},"
                           "{\"weight\":\"\",\"k\":576,\"n\":192,\"rows\":512,\"threads\":2,"
                           "\"npuflow_ms\":1,\"cpu_ms\":1,\"rounds\":3},"
                           "{\"weight\":\"q8_0\",\"k\":576,\"n\":192,\"rows\":512,\"threads\":2,"
                           "\"npuflow_ms\":1.5,\"cpu_ms\":1.5,\"rounds\":3}]}";
  }
  MatmulCostTable rows(path, "id");
  ASSERT_FALSE(rows.load().has_value());
  EXPECT_EQ(rows.size(), 1u) << "only the complete, positive measurement is a row";
  const MatmulCost* tie = rows.find({"q8_0", 576, 192, 512, 2});
  ASSERT_NE(tie, nullptr);
  EXPECT_TRUE(tie->npuflow_not_slower()) << "equal costs: not slower";
  std::filesystem::remove(path);
}

TEST(MatmulCosts, DefaultPathIsKeyedByTheIdentity) {
  const std::string a = default_matmul_cost_path("build 1");
  const std::string b = default_matmul_cost_path("build 2");
  EXPECT_NE(a, b);
  EXPECT_EQ(a, default_matmul_cost_path("build 1"));
  EXPECT_NE(a.find("/ggml-costs-"), std::string::npos) << a;
}

TEST(MatmulCosts, DescriptionsCarryBothCosts) {
  EXPECT_EQ(describe(MatmulCostKey{"q4_1", 576, 1536, 512, 2}),
            "q4_1 K=576 N=1536 M~512 (2 threads)");
  EXPECT_EQ(describe_costs({1.25, 3.5, 5}), "NPUFLOW 1.250 ms, CPU backend 3.500 ms (2.80x)");
}

}  // namespace
}  // namespace npuflow
