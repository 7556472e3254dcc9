// The guard around every ggml callback: an exception raised inside supports_op or graph_compute
// (injected through ggml_backend_npuflow_inject_fault) comes back to the host program as a clean
// answer, and a MUL_MAT or FLASH_ATTN_EXT whose device step throws is recomputed on the host
// reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

// A FLASH_ATTN_EXT at the default thresholds (1024 keys, 128 query rows): taken, and when its
// device step throws, recomputed by the host reference, which on the host device is the same
// arithmetic (so the output is identical) and counted as a fallback.
TEST_F(Guard, AThrowingAttentionStepIsRecomputedOnTheHost) {
  constexpr int64_t kHeadDim = 32, kKv = 1024, kTokens = 128, kHeads = 4, kKvHeads = 2;
  ggml_init_params params{ggml_tensor_overhead() * 8 + ggml_graph_overhead(), nullptr, true};
  ggml_context* ctx = ggml_init(params);
  ggml_tensor* q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, kHeadDim, kTokens, kHeads, 1);
  ggml_tensor* k = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, kHeadDim, kKv, kKvHeads, 1);
  ggml_tensor* v = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, kHeadDim, kKv, kKvHeads, 1);
  ggml_tensor* mask = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, kKv, kTokens, 1, 1);
  ggml_tensor* out = ggml_flash_attn_ext(ctx, q, k, v, mask, 0.5f, 0.0f, 0.0f);
  ggml_backend_buffer_t buffer =
      ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_cpu_buffer_type());
  std::vector<float> qv(ggml_nelements(q));
  uint32_t state = 12345;  // a small LCG: varied values, the same on every run
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return static_cast<float>(state >> 8) / static_cast<float>(1u << 24) * 2.0f - 1.0f;
  };
  for (float& value : qv) value = next();
  ggml_backend_tensor_set(q, qv.data(), 0, ggml_nbytes(q));
  std::vector<ggml_fp16_t> kv(ggml_nelements(k));
  for (ggml_fp16_t& value : kv) value = ggml_fp32_to_fp16(next());
  ggml_backend_tensor_set(k, kv.data(), 0, ggml_nbytes(k));
  for (ggml_fp16_t& value : kv) value = ggml_fp32_to_fp16(next());
  ggml_backend_tensor_set(v, kv.data(), 0, ggml_nbytes(v));
  // Causal over the last kTokens keys, as a prefill ubatch at the end of a 1024-token context.
  std::vector<ggml_fp16_t> m(ggml_nelements(mask));
  for (int64_t i = 0; i < kTokens; ++i)
    for (int64_t j = 0; j < kKv; ++j)
      m[i * kKv + j] = ggml_fp32_to_fp16(j <= kKv - kTokens + i ? 0.0f : -INFINITY);
  ggml_backend_tensor_set(mask, m.data(), 0, ggml_nbytes(mask));
  ggml_cgraph* graph = ggml_new_graph(ctx);
  ggml_build_forward_expand(graph, out);
  ASSERT_TRUE(ggml_backend_dev_supports_op(loaded_.npuflow_dev, out));

  const ggml_npuflow_stats before = npuflow_test::npuflow_stats(loaded_.npuflow_reg);
  std::vector<float> on_device(ggml_nelements(out)), on_host(ggml_nelements(out));
  ASSERT_EQ(ggml_backend_graph_compute(backend_, graph), GGML_STATUS_SUCCESS);
  ggml_backend_tensor_get(out, on_device.data(), 0, ggml_nbytes(out));
  ASSERT_EQ(inject_("device_compute"), 0);
  ASSERT_EQ(ggml_backend_graph_compute(backend_, graph), GGML_STATUS_SUCCESS);
  ggml_backend_tensor_get(out, on_host.data(), 0, ggml_nbytes(out));
  const ggml_npuflow_stats after = npuflow_test::npuflow_stats(loaded_.npuflow_reg);
  EXPECT_EQ(on_host, on_device);
  EXPECT_EQ(after.flash_attn, before.flash_attn + 2);
  EXPECT_EQ(after.flash_attn_host_fallback, before.flash_attn_host_fallback + 1);
  // ... and both are the CPU backend's attention, within test-backend-ops' NMSE bound.
  ggml_backend_t cpu = ggml_backend_dev_init(loaded_.cpu_dev, nullptr);
  ASSERT_EQ(ggml_backend_graph_compute(cpu, graph), GGML_STATUS_SUCCESS);
  std::vector<float> on_cpu(ggml_nelements(out));
  ggml_backend_tensor_get(out, on_cpu.data(), 0, ggml_nbytes(out));
  ggml_backend_free(cpu);
  double error = 0, energy = 0;
  for (size_t i = 0; i < on_cpu.size(); ++i) {
    error += (on_device[i] - on_cpu[i]) * double(on_device[i] - on_cpu[i]);
    energy += on_cpu[i] * double(on_cpu[i]);
  }
  EXPECT_GT(energy, 0.0);
  EXPECT_LE(error / energy, 5e-4);

  // One key fewer than fa_min_kv, or one query row fewer than min_m: the CPU backend's.
  ggml_tensor* short_k =
      ggml_view_4d(ctx, k, kHeadDim, kKv - 1, kKvHeads, 1, k->nb[1], k->nb[2], k->nb[3], 0);
  ggml_tensor* short_v =
      ggml_view_4d(ctx, v, kHeadDim, kKv - 1, kKvHeads, 1, v->nb[1], v->nb[2], v->nb[3], 0);
  EXPECT_FALSE(ggml_backend_dev_supports_op(
      loaded_.npuflow_dev, ggml_flash_attn_ext(ctx, q, short_k, short_v, nullptr, 1, 0, 0)));
  ggml_backend_buffer_free(buffer);
  ggml_free(ctx);
}

TEST_F(Guard, UnknownFaultPointsAreRejected) {
  EXPECT_NE(inject_("no_such_callback"), 0);
}

}  // namespace
