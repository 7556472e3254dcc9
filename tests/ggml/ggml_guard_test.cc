// The guard around every ggml callback: an exception raised inside supports_op or graph_compute
// (injected through ggml_backend_npuflow_inject_fault) comes back to the host program as a clean
// answer, and a MUL_MAT whose device step throws is recomputed on the host reference.
#include <gtest/gtest.h>

#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml.h"
#include "ggml_test_util.h"

namespace {

// M above the default min_m (128); N spans several weight-preparation tasks (64 rows each), so
// the device-step fault is raised on a worker thread of the backend's OpenMP loop.
constexpr int64_t kK = 64, kN = 192, kM = 256;

class Guard : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    loaded_ = npuflow_test::load_backends();
    inject_ = reinterpret_cast<ggml_npuflow_inject_fault_t>(ggml_backend_reg_get_proc_address(
        loaded_.npuflow_reg, "ggml_backend_npuflow_inject_fault"));
    backend_ = ggml_backend_dev_init(loaded_.npuflow_dev, nullptr);
  }
  static void TearDownTestSuite() { ggml_backend_free(backend_); }

  void SetUp() override {
    ASSERT_NE(inject_, nullptr) << "libggml-npuflow.so has no ggml_backend_npuflow_inject_fault";
    ggml_init_params params{ggml_tensor_overhead() * 4 + ggml_graph_overhead(), nullptr, true};
    ctx_ = ggml_init(params);
    w_ = ggml_new_tensor_2d(ctx_, GGML_TYPE_F32, kK, kN);
    x_ = ggml_new_tensor_2d(ctx_, GGML_TYPE_F32, kK, kM);
    // A weight name per test: the resident-weight cache must not serve one test's weight to the
    // next, which would skip the device step's weight preparation.
    ggml_set_name(w_, ::testing::UnitTest::GetInstance()->current_test_info()->name());
    y_ = ggml_mul_mat(ctx_, w_, x_);
    buffer_ = ggml_backend_alloc_ctx_tensors_from_buft(ctx_, ggml_backend_cpu_buffer_type());
    // Small integers: every product and sum is exact in fp32, on any route.
    std::vector<float> w(kK * kN), x(kK * kM);
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(static_cast<int>(i % 5) - 2);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(i % 7) - 3);
    ggml_backend_tensor_set(w_, w.data(), 0, ggml_nbytes(w_));
    ggml_backend_tensor_set(x_, x.data(), 0, ggml_nbytes(x_));
    expected_.assign(kN * kM, 0.0f);
    for (int64_t m = 0; m < kM; ++m)
      for (int64_t n = 0; n < kN; ++n)
        for (int64_t k = 0; k < kK; ++k) expected_[m * kN + n] += x[m * kK + k] * w[n * kK + k];
    graph_ = ggml_new_graph(ctx_);
    ggml_build_forward_expand(graph_, y_);
  }
  void TearDown() override {
    if (inject_ != nullptr) {
      EXPECT_EQ(inject_(nullptr), 0);
    }
    ggml_backend_buffer_free(buffer_);
    ggml_free(ctx_);
  }

  std::vector<float> output() {
    std::vector<float> y(kN * kM);
    ggml_backend_tensor_get(y_, y.data(), 0, ggml_nbytes(y_));
    return y;
  }

  static inline npuflow_test::LoadedBackends loaded_;
  static inline ggml_npuflow_inject_fault_t inject_ = nullptr;
  static inline ggml_backend_t backend_ = nullptr;
  ggml_context* ctx_ = nullptr;
  ggml_tensor *w_ = nullptr, *x_ = nullptr, *y_ = nullptr;
  ggml_backend_buffer_t buffer_ = nullptr;
  ggml_cgraph* graph_ = nullptr;
  std::vector<float> expected_;
};

TEST_F(Guard, AThrowingSupportsOpAnswersNo) {
  EXPECT_TRUE(ggml_backend_dev_supports_op(loaded_.npuflow_dev, y_));
  ASSERT_EQ(inject_("supports_op"), 0);
  EXPECT_FALSE(ggml_backend_dev_supports_op(loaded_.npuflow_dev, y_));
  ASSERT_EQ(inject_(nullptr), 0);
  EXPECT_TRUE(ggml_backend_dev_supports_op(loaded_.npuflow_dev, y_));
}

TEST_F(Guard, AThrowingDeviceStepIsRecomputedOnTheHost) {
  const ggml_npuflow_stats before = npuflow_test::npuflow_stats(loaded_.npuflow_reg);
  ASSERT_EQ(inject_("device_compute"), 0);
  ASSERT_EQ(ggml_backend_graph_compute(backend_, graph_), GGML_STATUS_SUCCESS);
  EXPECT_EQ(output(), expected_);
  const ggml_npuflow_stats after = npuflow_test::npuflow_stats(loaded_.npuflow_reg);
  EXPECT_EQ(after.mul_mat_host_fallback, before.mul_mat_host_fallback + 1);
}

TEST_F(Guard, AThrowingGraphComputeFailsCleanlyAndTheBackendStillWorks) {
  ASSERT_EQ(inject_("graph_compute"), 0);
  EXPECT_EQ(ggml_backend_graph_compute(backend_, graph_), GGML_STATUS_FAILED);
  ASSERT_EQ(inject_(nullptr), 0);
  ASSERT_EQ(ggml_backend_graph_compute(backend_, graph_), GGML_STATUS_SUCCESS);
  EXPECT_EQ(output(), expected_);
}

TEST_F(Guard, UnknownFaultPointsAreRejected) {
  EXPECT_NE(inject_("no_such_callback"), 0);
}

}  // namespace
