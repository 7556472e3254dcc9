// Do no harm on the host device (issue #18), through ggml's public API as the scheduler asks:
//
//   ClaimFaster.*  (ctest: NPUFLOW_DEVICE=host, claim left at auto, which is faster on host)
//                  supports_op takes a MUL_MAT exactly where the cost table says NPUFLOW is not
//                  slower than the CPU backend, on random tables; the routing rules still come
//                  first; a shape the table lacks is measured once against the real CPU backend
//                  and recorded; a table of another machine or build is not read; the stats name
//                  what was taken and declined, with both costs.
//   ClaimAll.*     (ctest: NPUFLOW_DEVICE=host NPUFLOW_CLAIM=all) every eligible MUL_MAT is taken
//                  whatever the table says, and nothing is measured.
//
// Each test switches the backend to its own table file (test hook
// ggml_backend_npuflow_use_cost_table) and fixes the CPU backend's thread count at 2 through
// ggml_backend_set_n_threads, as llama.cpp does before every graph.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "ggml_test_util.h"

namespace {

constexpr int kThreads = 2;

struct TableRow {
  ggml_type type;
  int64_t k, n, rows;
  double npuflow_ms, cpu_ms;
};

class CostPolicy : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    loaded_ = npuflow_test::load_backends();
    identity_ = reinterpret_cast<ggml_npuflow_cost_identity_t>(ggml_backend_reg_get_proc_address(
        loaded_.npuflow_reg, "ggml_backend_npuflow_cost_identity"));
    use_table_ = reinterpret_cast<ggml_npuflow_use_cost_table_t>(ggml_backend_reg_get_proc_address(
        loaded_.npuflow_reg, "ggml_backend_npuflow_use_cost_table"));
    backend_ = ggml_backend_dev_init(loaded_.npuflow_dev, nullptr);
    auto set_threads = reinterpret_cast<ggml_backend_set_n_threads_t>(
        ggml_backend_reg_get_proc_address(loaded_.npuflow_reg, "ggml_backend_set_n_threads"));
    if (set_threads != nullptr) set_threads(backend_, kThreads);
  }
  static void TearDownTestSuite() {
    if (backend_ != nullptr) ggml_backend_free(backend_);
  }

  void SetUp() override {
    ASSERT_NE(identity_, nullptr);
    ASSERT_NE(use_table_, nullptr);
    ggml_init_params params{16 * 1024 * 1024, nullptr, true};
    ctx_ = ggml_init(params);
    path_ = (std::filesystem::temp_directory_path() /
             (std::string("npuflow-ggml-costs-") +
              ::testing::UnitTest::GetInstance()->current_test_info()->name() + "-" +
              std::to_string(getpid()) + ".json"))
                .string();
    std::filesystem::remove(path_);
  }
  void TearDown() override {
    ggml_free(ctx_);
    std::filesystem::remove(path_);
  }

  void write_table(const std::string& identity, const std::vector<TableRow>& rows) {
    std::ostringstream out;
    out.precision(17);
    out << "{\"identity\":\"" << identity << "\",\"rows\":[";
    for (size_t i = 0; i < rows.size(); ++i) {
      const TableRow& r = rows[i];
      out << (i ? "," : "") << "{\"weight\":\"" << ggml_type_name(r.type) << "\",\"k\":" << r.k
          << ",\"n\":" << r.n << ",\"rows\":" << r.rows << ",\"threads\":" << kThreads
          << ",\"npuflow_ms\":" << r.npuflow_ms << ",\"cpu_ms\":" << r.cpu_ms << ",\"rounds\":3}";
    }
    out << "]}";
    std::ofstream(path_) << out.str();
    use_table_(path_.c_str());
  }
  std::string read_table() const {
    std::ifstream file(path_);
    std::stringstream text;
    text << file.rdbuf();
    return text.str();
  }

  ggml_tensor* mul_mat(ggml_type type, int64_t k, int64_t n, int64_t m, const char* name) {
    ggml_tensor* w = ggml_new_tensor_2d(ctx_, type, k, n);
    ggml_set_name(w, name);
    return ggml_mul_mat(ctx_, w, ggml_new_tensor_2d(ctx_, GGML_TYPE_F32, k, m));
  }
  bool supports(ggml_type type, int64_t k, int64_t n, int64_t m,
                const char* name = "blk.0.test.weight") {
    return ggml_backend_dev_supports_op(loaded_.npuflow_dev, mul_mat(type, k, n, m, name));
  }

  static inline npuflow_test::LoadedBackends loaded_;
  static inline ggml_npuflow_cost_identity_t identity_ = nullptr;
  static inline ggml_npuflow_use_cost_table_t use_table_ = nullptr;
  static inline ggml_backend_t backend_ = nullptr;
  ggml_context* ctx_ = nullptr;
  std::string path_;
};

class ClaimFaster : public CostPolicy {};
class ClaimAll : public CostPolicy {};

const ggml_type kTypes[] = {GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16,
                            GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,
                            GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};

// Random shapes on the device contract (K a multiple of 32 and of the block, N of 16), row
// buckets 128..4096, and costs either way, ties included.
std::vector<TableRow> random_rows(std::mt19937& rng, int count) {
  std::vector<TableRow> rows;
  for (int i = 0; i < count; ++i) {
    TableRow r;
    r.type = kTypes[rng() % std::size(kTypes)];
    const int64_t block = std::max<int64_t>(32, ggml_blck_size(r.type));
    r.k = block * (1 + static_cast<int64_t>(rng() % 24));
    r.n = 16 * (1 + static_cast<int64_t>(rng() % 512));
    r.rows = int64_t{128} << (rng() % 6);
    r.cpu_ms = 0.05 + (rng() % 10000) / 100.0;
    const int verdict = static_cast<int>(rng() % 3);  // faster, slower, tie
    r.npuflow_ms = verdict == 0 ? r.cpu_ms * 0.5 : verdict == 1 ? r.cpu_ms * 1.5 : r.cpu_ms;
    bool duplicate = false;
    for (const TableRow& o : rows) {
      duplicate |= o.type == r.type && o.k == r.k && o.n == r.n && o.rows == r.rows;
    }
    if (!duplicate) rows.push_back(r);
  }
  return rows;
}

TEST_F(ClaimFaster, TakesWhatTheTableSaysIsNotSlowerAndDeclinesTheRest) {
  std::mt19937 rng(20250518u + ::testing::UnitTest::GetInstance()->random_seed());
  const std::vector<TableRow> rows = random_rows(rng, 80);
  write_table(identity_(), rows);
  const std::string written = read_table();
  const auto before = npuflow_test::npuflow_stats(loaded_.npuflow_reg);
  int64_t declined = 0, taken = 0;
  for (const TableRow& r : rows) {
    const bool expected = r.npuflow_ms <= r.cpu_ms;
    // Any row count of the bucket reads the bucket's row (within a factor sqrt(2) of it).
    std::uniform_real_distribution<double> within(0.75, 1.4);
    const int64_t m = std::max<int64_t>(128, std::llround(r.rows * within(rng)));
    for (int64_t rows_asked : {r.rows, m}) {
      SCOPED_TRACE(std::string(ggml_type_name(r.type)) + " K=" + std::to_string(r.k) +
                   " N=" + std::to_string(r.n) + " M=" + std::to_string(rows_asked));
      EXPECT_EQ(supports(r.type, r.k, r.n, rows_asked), expected)
          << "npuflow " << r.npuflow_ms << " ms, cpu " << r.cpu_ms << " ms";
      (expected ? taken : declined)++;
    }
  }
  EXPECT_GT(taken, 0);
  EXPECT_GT(declined, 0);
  const auto after = npuflow_test::npuflow_stats(loaded_.npuflow_reg);
  EXPECT_EQ(after.supports_mul_mat_yes - before.supports_mul_mat_yes, taken);
  EXPECT_EQ(after.supports_mul_mat_declined - before.supports_mul_mat_declined, declined);
  EXPECT_EQ(read_table(), written) << "every shape was in the table: nothing measured";
}

TEST_F(ClaimFaster, TheRoutingRulesComeFirst) {
  // Rows that say NPUFLOW is far faster for shapes the routing rules refuse.
  write_table(identity_(), {{GGML_TYPE_F32, 584, 576, 512, 0.001, 100},
                            {GGML_TYPE_F16, 576, 584, 512, 0.001, 100},
                            {GGML_TYPE_Q4_1, 576, 576, 1, 0.001, 100},
                            {GGML_TYPE_Q4_1, 576, 576, 64, 0.001, 100}});
  EXPECT_FALSE(supports(GGML_TYPE_F32, 584, 576, 512)) << "K % 32 != 0";
  EXPECT_FALSE(supports(GGML_TYPE_F16, 576, 584, 512)) << "N % 16 != 0";
  EXPECT_FALSE(supports(GGML_TYPE_Q4_1, 576, 576, 1)) << "decode stays on the CPU";
  EXPECT_FALSE(supports(GGML_TYPE_Q4_1, 576, 576, 64)) << "below min_m_quant";
}

TEST_F(ClaimFaster, AShapeTheTableLacksIsMeasuredOnceAndRecorded) {
  use_table_(path_.c_str());  // no file yet
  const auto before = npuflow_test::npuflow_stats(loaded_.npuflow_reg);
  const bool taken = supports(GGML_TYPE_Q8_0, 256, 256, 128);
  const std::string table = read_table();
  ASSERT_FALSE(table.empty()) << "the measurement was not recorded at " << path_;
  EXPECT_NE(table.find(std::string("\"identity\":\"") + identity_() + "\""), std::string::npos)
      << table;
  // The one row: both costs measured (positive), and the answer is theirs.
  const std::string key = "{\"weight\":\"q8_0\",\"k\":256,\"n\":256,\"rows\":128,\"threads\":2,";
  const size_t at = table.find(key);
  ASSERT_NE(at, std::string::npos) << table;
  double npuflow_ms = 0, cpu_ms = 0;
  ASSERT_EQ(std::sscanf(table.c_str() + at + key.size(), "\"npuflow_ms\":%lf,\"cpu_ms\":%lf",
                        &npuflow_ms, &cpu_ms),
            2)
      << table;
  EXPECT_GT(npuflow_ms, 0);
  EXPECT_GT(cpu_ms, 0);
  EXPECT_EQ(taken, npuflow_ms <= cpu_ms) << "npuflow " << npuflow_ms << " ms, cpu " << cpu_ms;
  // The same bucket again: decided, not measured again.
  EXPECT_EQ(supports(GGML_TYPE_Q8_0, 256, 256, 150), taken);
  EXPECT_EQ(read_table(), table);
  // The probe's own runs are not NPUFLOW work: nothing counted, nothing left resident.
  const auto after = npuflow_test::npuflow_stats(loaded_.npuflow_reg);
  EXPECT_EQ(after.mul_mat, before.mul_mat);
  EXPECT_EQ(after.weights_packed, before.weights_packed);
  // A fresh process (here: the table read anew) decides the same from the file.
  use_table_(path_.c_str());
  EXPECT_EQ(supports(GGML_TYPE_Q8_0, 256, 256, 128), taken);
  EXPECT_EQ(read_table(), table);
}

TEST_F(ClaimFaster, ATableFromAnotherMachineOrBuildIsNotRead) {
  // It says NPUFLOW is 100000x faster; this build must measure for itself.
  write_table(std::string(identity_()) + " (an older build)",
              {{GGML_TYPE_Q4_0, 256, 256, 128, 0.001, 100}});
  supports(GGML_TYPE_Q4_0, 256, 256, 128);
  const std::string table = read_table();
  EXPECT_NE(table.find(std::string("\"identity\":\"") + identity_() + "\""), std::string::npos)
      << table;
  EXPECT_EQ(table.find("older build"), std::string::npos) << table;
  EXPECT_EQ(table.find("\"cpu_ms\":100,"), std::string::npos) << "the old row survived: " << table;
  EXPECT_NE(table.find("{\"weight\":\"q4_0\",\"k\":256,\"n\":256,\"rows\":128"), std::string::npos)
      << table;
}

TEST_F(ClaimFaster, TheStatsNameWhatWasTakenAndDeclinedWithBothCosts) {
  write_table(identity_(), {{GGML_TYPE_Q4_1, 576, 1536, 512, 1.25, 3.5},
                            {GGML_TYPE_Q4_K, 1536, 576, 512, 2.0, 1.0}});
  EXPECT_TRUE(supports(GGML_TYPE_Q4_1, 576, 1536, 512, "blk.0.ffn_up.weight"));
  EXPECT_TRUE(supports(GGML_TYPE_Q4_1, 576, 1536, 512, "blk.17.ffn_gate.weight"));
  EXPECT_FALSE(supports(GGML_TYPE_Q4_K, 1536, 576, 512, "blk.3.ffn_down.weight"));
  ggml_backend_t backend = ggml_backend_dev_init(loaded_.npuflow_dev, nullptr);
  ASSERT_NE(backend, nullptr);
  ::testing::internal::CaptureStderr();
  ggml_backend_free(backend);  // NPUFLOW_PROF=1: prints the stats
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("NPUFLOW claim=faster (cost table " + path_ +
                     "): took 1 MUL_MAT shapes, declined 1 as slower"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("took q4_1 K=576 N=1536 M~512 (2 threads): NPUFLOW 1.250 ms, CPU backend "
                     "3.500 ms (2.80x): blk.*.ffn_gate.weight, blk.*.ffn_up.weight"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("declined as slower q4_K K=1536 N=576 M~512 (2 threads): NPUFLOW 2.000 ms, "
                     "CPU backend 1.000 ms (0.50x): blk.*.ffn_down.weight"),
            std::string::npos)
      << err;
}

TEST_F(ClaimAll, TakesEveryEligibleMulMatWhateverTheTableSays) {
  std::mt19937 rng(7u + ::testing::UnitTest::GetInstance()->random_seed());
  std::vector<TableRow> rows = random_rows(rng, 40);
  for (TableRow& r : rows) r.npuflow_ms = r.cpu_ms * 10;  // all slower
  write_table(identity_(), rows);
  for (const TableRow& r : rows) {
    EXPECT_TRUE(supports(r.type, r.k, r.n, r.rows)) << ggml_type_name(r.type) << " K=" << r.k;
  }
  // Unmeasured shapes are taken without measuring anything.
  const std::string table = read_table();
  EXPECT_TRUE(supports(GGML_TYPE_Q8_0, 256, 272, 128));
  EXPECT_EQ(read_table(), table);
  EXPECT_FALSE(supports(GGML_TYPE_Q8_0, 256, 272, 1)) << "the routing rules still apply";
}

}  // namespace
