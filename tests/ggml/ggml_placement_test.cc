// The placement contract of the NPUFLOW device, asked through ggml's public API exactly as the
// scheduler asks it: supports_op answers for a table of (op, types, shape, M) cases, near misses
// included, and the device's identity, type and buffer rules. Thresholds follow the knobs in
// the environment (ctest runs Placement.* twice, on NPUFLOW_DEVICE=host with NPUFLOW_CLAIM=all:
// defaults, and NPUFLOW_MIN_M=64 NPUFLOW_MIN_M_QUANT=512).
//
// OffBoard.* is what the default, NPUFLOW_DEVICE=auto, does on a machine without an NPU (ctest
// runs it with NPUFLOW_DEVICE=auto NPUFLOW_LOG=info; this build has no rocket device, so every
// machine is such a machine): the device registers and takes no op, not even the views.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "ggml_test_util.h"
#include "npuflow/version.h"

namespace {

int64_t env_or(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoll(v) : fallback;
}

class Placement : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { loaded_ = npuflow_test::load_backends(); }
  void SetUp() override {
    ggml_init_params params{64 * 1024 * 1024, nullptr, true};
    ctx_ = ggml_init(params);
  }
  void TearDown() override { ggml_free(ctx_); }

  bool supports(const ggml_tensor* op) {
    return ggml_backend_dev_supports_op(loaded_.npuflow_dev, op);
  }
  ggml_tensor* weight(ggml_type type, int64_t k, int64_t n) {
    return ggml_new_tensor_2d(ctx_, type, k, n);
  }
  ggml_tensor* acts(int64_t k, int64_t m, ggml_type type = GGML_TYPE_F32) {
    return ggml_new_tensor_2d(ctx_, type, k, m);
  }
  bool mul_mat(ggml_type type, int64_t k, int64_t n, int64_t m) {
    return supports(ggml_mul_mat(ctx_, weight(type, k, n), acts(k, m)));
  }

  static inline npuflow_test::LoadedBackends loaded_;
  ggml_context* ctx_ = nullptr;
  const int64_t min_m_ = env_or("NPUFLOW_MIN_M", 128);
  const int64_t min_m_quant_ = env_or("NPUFLOW_MIN_M_QUANT", 128);
};

TEST_F(Placement, DeviceIdentity) {
  EXPECT_STREQ(ggml_backend_dev_name(loaded_.npuflow_dev), "NPUFLOW");
  EXPECT_EQ(ggml_backend_dev_type(loaded_.npuflow_dev), GGML_BACKEND_DEVICE_TYPE_ACCEL);
  const std::string description = ggml_backend_dev_description(loaded_.npuflow_dev);
  EXPECT_NE(description.find("npuflow " NPUFLOW_VERSION " on host"), std::string::npos)
      << description;
  EXPECT_TRUE(ggml_backend_dev_supports_buft(loaded_.npuflow_dev, ggml_backend_cpu_buffer_type()));
  EXPECT_EQ(ggml_backend_dev_buffer_type(loaded_.npuflow_dev), ggml_backend_cpu_buffer_type());
  ggml_backend_dev_props props{};
  ggml_backend_dev_get_props(loaded_.npuflow_dev, &props);
  EXPECT_TRUE(props.caps.buffer_from_host_ptr);
  EXPECT_TRUE(props.caps.mmap_support);
  EXPECT_FALSE(props.caps.async);
}

struct Row {
  ggml_type type;
  int64_t k, n;
};

TEST_F(Placement, FloatAndQuantizedWeightsAtTheThreshold) {
  const Row rows[] = {
      {GGML_TYPE_F32, 576, 576},     {GGML_TYPE_F16, 576, 1536},   {GGML_TYPE_BF16, 2048, 512},
      {GGML_TYPE_Q8_0, 576, 192},    {GGML_TYPE_Q4_0, 2048, 8192}, {GGML_TYPE_Q4_1, 576, 576},
      {GGML_TYPE_Q4_K, 1536, 576},   {GGML_TYPE_Q5_K, 2048, 2048}, {GGML_TYPE_Q6_K, 8192, 2048},
      {GGML_TYPE_MXFP4, 2880, 2880},  // gpt-oss's expert width
  };
  for (const Row& r : rows) {
    const bool quant = ggml_is_quantized(r.type);
    const int64_t min = quant ? min_m_quant_ : min_m_;
    SCOPED_TRACE(std::string(ggml_type_name(r.type)) + " K=" + std::to_string(r.k) +
                 " N=" + std::to_string(r.n) + " min=" + std::to_string(min));
    EXPECT_TRUE(mul_mat(r.type, r.k, r.n, min));
    EXPECT_TRUE(mul_mat(r.type, r.k, r.n, 2048));
    EXPECT_FALSE(mul_mat(r.type, r.k, r.n, min - 1));
    EXPECT_FALSE(mul_mat(r.type, r.k, r.n, 1)) << "decode must stay on the CPU";
  }
}

TEST_F(Placement, BatchDimensionsCountAsRows) {
  // Activations [K, M, B]: the rows are M*B (the weight broadcasts over B).
  ggml_tensor* w = weight(GGML_TYPE_F16, 576, 576);
  EXPECT_TRUE(
      supports(ggml_mul_mat(ctx_, w, ggml_new_tensor_3d(ctx_, GGML_TYPE_F32, 576, min_m_ / 2, 2))));
  EXPECT_FALSE(supports(
      ggml_mul_mat(ctx_, w, ggml_new_tensor_3d(ctx_, GGML_TYPE_F32, 576, min_m_ / 2 - 1, 2))));
}

TEST_F(Placement, DeviceContractNearMisses) {
  const int64_t m = 2048;
  EXPECT_FALSE(mul_mat(GGML_TYPE_F32, 592 - 8, 576, m)) << "K % 32 != 0";
  EXPECT_FALSE(mul_mat(GGML_TYPE_F16, 576, 584, m)) << "N % 16 != 0";
  EXPECT_TRUE(mul_mat(GGML_TYPE_F16, 576, 592, m)) << "N % 16 == 0";
  EXPECT_FALSE(mul_mat(GGML_TYPE_Q4_K, 576, 576, m)) << "K % 256 != 0 for K-quants";
  EXPECT_FALSE(mul_mat(GGML_TYPE_Q6_K, 2048 + 32, 2048, m)) << "K % 256 != 0 for K-quants";
  EXPECT_TRUE(mul_mat(GGML_TYPE_Q8_0, 2048 + 32, 2048, m)) << "K % 32 is enough for Q8_0";
}

TEST_F(Placement, UnsupportedWeightTypesStayOnTheCpu) {
  for (ggml_type type : {GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,
                         GGML_TYPE_IQ4_NL, GGML_TYPE_NVFP4}) {
    EXPECT_FALSE(mul_mat(type, 2048, 2048, 2048)) << ggml_type_name(type);
  }
}

TEST_F(Placement, ActivationAndWeightStructure) {
  const int64_t m = 512;
  // F16 activations.
  EXPECT_FALSE(
      supports(ggml_mul_mat(ctx_, weight(GGML_TYPE_F16, 576, 576), acts(576, m, GGML_TYPE_F16))));
  // Attention: Q*K^T where K is a view of the KV cache.
  ggml_tensor* cache = ggml_new_tensor_3d(ctx_, GGML_TYPE_F16, 64, 4096, 9);
  ggml_tensor* k_view = ggml_view_2d(ctx_, cache, 64, m, cache->nb[1], 0);
  EXPECT_FALSE(supports(ggml_mul_mat(ctx_, k_view, acts(64, m)))) << "weight is a view";
  // A weight computed by the graph.
  ggml_tensor* computed = ggml_cont(ctx_, ggml_transpose(ctx_, weight(GGML_TYPE_F32, 576, 576)));
  EXPECT_FALSE(supports(ggml_mul_mat(ctx_, computed, acts(576, m)))) << "weight not a leaf";
  // A 3-D (batched) weight.
  ggml_tensor* batched = ggml_new_tensor_3d(ctx_, GGML_TYPE_F16, 576, 576, 2);
  EXPECT_FALSE(
      supports(ggml_mul_mat(ctx_, batched, ggml_new_tensor_3d(ctx_, GGML_TYPE_F32, 576, m, 2))));
  // Non-contiguous activations.
  ggml_tensor* x = ggml_new_tensor_3d(ctx_, GGML_TYPE_F32, 576, 4, m);
  EXPECT_FALSE(supports(
      ggml_mul_mat(ctx_, weight(GGML_TYPE_F32, 576, 576), ggml_permute(ctx_, x, 0, 2, 1, 3))));
  // The Hadamard hint.
  ggml_tensor* hinted = ggml_mul_mat(ctx_, weight(GGML_TYPE_F16, 576, 576), acts(576, m));
  hinted->op_params[1] = GGML_HINT_SRC0_IS_HADAMARD;
  EXPECT_FALSE(supports(hinted));
}

TEST_F(Placement, OnlyViewsMatmulsExpertsAndPrefillAttentionAreClaimed) {
  ggml_tensor* a = acts(576, 512);
  ggml_tensor* b = acts(576, 512);
  EXPECT_TRUE(supports(a)) << "NONE";
  EXPECT_TRUE(supports(ggml_reshape_2d(ctx_, a, 512, 576)));
  EXPECT_TRUE(supports(ggml_view_1d(ctx_, a, 64, 0)));
  EXPECT_TRUE(supports(ggml_permute(ctx_, ggml_reshape_3d(ctx_, a, 64, 9, 512), 0, 2, 1, 3)));
  EXPECT_TRUE(supports(ggml_transpose(ctx_, a)));
  // Neighbours of an offloaded matmul must not migrate.
  EXPECT_FALSE(supports(ggml_add(ctx_, a, b)));
  EXPECT_FALSE(supports(ggml_mul(ctx_, a, b)));
  EXPECT_FALSE(supports(ggml_rms_norm(ctx_, a, 1e-5f)));
  EXPECT_FALSE(supports(ggml_soft_max(ctx_, a)));
  EXPECT_FALSE(supports(ggml_silu(ctx_, a)));
  EXPECT_FALSE(supports(ggml_cpy(ctx_, a, b)));
  EXPECT_FALSE(supports(ggml_cont(ctx_, ggml_transpose(ctx_, a))));
  ggml_tensor* ids = ggml_new_tensor_1d(ctx_, GGML_TYPE_I32, 512);
  EXPECT_FALSE(supports(ggml_get_rows(ctx_, weight(GGML_TYPE_Q4_1, 576, 4096), ids)));
  // Flash attention from 1024 keys (fa_min_kv) and min_m query rows; no ALiBi, F16 K/V only.
  const auto attention = [&](int64_t tokens, int64_t kv, ggml_type kv_type, float max_bias) {
    ggml_tensor* q = ggml_new_tensor_3d(ctx_, GGML_TYPE_F32, 64, tokens, 9);
    ggml_tensor* k = ggml_new_tensor_3d(ctx_, kv_type, 64, kv, 3);
    ggml_tensor* v = ggml_new_tensor_3d(ctx_, kv_type, 64, kv, 3);
    ggml_tensor* mask = ggml_new_tensor_2d(ctx_, GGML_TYPE_F16, kv, tokens);
    return ggml_flash_attn_ext(ctx_, q, k, v, mask, 0.125f, max_bias, 0.0f);
  };
  EXPECT_TRUE(supports(attention(min_m_, 1024, GGML_TYPE_F16, 0.0f)));
  EXPECT_FALSE(supports(attention(min_m_ - 1, 1024, GGML_TYPE_F16, 0.0f))) << "decode";
  EXPECT_FALSE(supports(attention(512, 1023, GGML_TYPE_F16, 0.0f))) << "short context";
  EXPECT_FALSE(supports(attention(512, 1024, GGML_TYPE_Q8_0, 0.0f))) << "quantized KV cache";
  EXPECT_FALSE(supports(attention(512, 1024, GGML_TYPE_F16, 8.0f))) << "ALiBi";
  // MoE experts: 2 of 8 per token, from min_m_quant rows in all (used x tokens); decode stays.
  ggml_tensor* experts = ggml_new_tensor_3d(ctx_, GGML_TYPE_Q4_0, 576, 1536, 8);
  const auto moe = [&](int64_t tokens) {
    ggml_tensor* expert_ids = ggml_new_tensor_2d(ctx_, GGML_TYPE_I32, 2, tokens);
    ggml_tensor* xe = ggml_new_tensor_3d(ctx_, GGML_TYPE_F32, 576, 1, tokens);
    return ggml_mul_mat_id(ctx_, experts, xe, expert_ids);
  };
  EXPECT_TRUE(supports(moe(min_m_quant_ / 2)));
  EXPECT_FALSE(supports(moe(min_m_quant_ / 2 - 1))) << "below min_m_quant rows";
  EXPECT_FALSE(supports(moe(1))) << "decode";
  ggml_tensor* odd_experts = ggml_new_tensor_3d(ctx_, GGML_TYPE_F16, 576, 1000, 8);
  EXPECT_FALSE(supports(ggml_mul_mat_id(ctx_, odd_experts,
                                        ggml_new_tensor_3d(ctx_, GGML_TYPE_F32, 576, 1, 512),
                                        ggml_new_tensor_2d(ctx_, GGML_TYPE_I32, 2, 512))))
      << "N off the contract";
}

// Every case the Placement tests see accepted on host, and the ops they see refused.
std::vector<ggml_tensor*> offered_ops(ggml_context* ctx) {
  std::vector<ggml_tensor*> ops;
  const Row rows[] = {
      {GGML_TYPE_F32, 576, 576},   {GGML_TYPE_F16, 576, 1536},   {GGML_TYPE_BF16, 2048, 512},
      {GGML_TYPE_Q8_0, 576, 192},  {GGML_TYPE_Q4_0, 2048, 8192}, {GGML_TYPE_Q4_1, 576, 576},
      {GGML_TYPE_Q4_K, 1536, 576}, {GGML_TYPE_Q5_K, 2048, 2048}, {GGML_TYPE_Q6_K, 8192, 2048},
  };
  for (const Row& r : rows) {
    for (int64_t m : {128, 512, 2048}) {
      ops.push_back(ggml_mul_mat(ctx, ggml_new_tensor_2d(ctx, r.type, r.k, r.n),
                                 ggml_new_tensor_2d(ctx, GGML_TYPE_F32, r.k, m)));
    }
  }
  ggml_tensor* a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 576, 512);
  ops.push_back(a);
  ops.push_back(ggml_reshape_2d(ctx, a, 512, 576));
  ops.push_back(ggml_view_1d(ctx, a, 64, 0));
  ops.push_back(ggml_transpose(ctx, a));
  ops.push_back(ggml_add(ctx, a, a));
  ops.push_back(ggml_mul_mat_id(ctx, ggml_new_tensor_3d(ctx, GGML_TYPE_Q4_0, 576, 1536, 8),
                                ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 576, 1, 512),
                                ggml_new_tensor_2d(ctx, GGML_TYPE_I32, 2, 512)));
  ops.push_back(ggml_flash_attn_ext(ctx, ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 64, 512, 9),
                                    ggml_new_tensor_3d(ctx, GGML_TYPE_F16, 64, 4096, 3),
                                    ggml_new_tensor_3d(ctx, GGML_TYPE_F16, 64, 4096, 3), nullptr,
                                    0.125f, 0.0f, 0.0f));
  return ops;
}

class OffBoard : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::testing::internal::CaptureStderr();
    loaded_ = npuflow_test::load_backends();
    load_log_ = ::testing::internal::GetCapturedStderr();
  }
  static inline npuflow_test::LoadedBackends loaded_;
  static inline std::string load_log_;
};

TEST_F(OffBoard, AutoWithoutAnNpuRegistersTheDeviceAndTakesNoOp) {
  EXPECT_STREQ(ggml_backend_dev_name(loaded_.npuflow_dev), "NPUFLOW");
  EXPECT_EQ(ggml_backend_dev_type(loaded_.npuflow_dev), GGML_BACKEND_DEVICE_TYPE_ACCEL);
  const std::string description = ggml_backend_dev_description(loaded_.npuflow_dev);
  EXPECT_NE(description.find("npuflow " NPUFLOW_VERSION " idle"), std::string::npos) << description;

  ggml_init_params params{64 * 1024 * 1024, nullptr, true};
  ggml_context* ctx = ggml_init(params);
  const auto before = npuflow_test::npuflow_stats(loaded_.npuflow_reg);
  const std::vector<ggml_tensor*> ops = offered_ops(ctx);
  int64_t matmuls = 0;
  for (ggml_tensor* op : ops) {
    EXPECT_FALSE(ggml_backend_dev_supports_op(loaded_.npuflow_dev, op)) << ggml_op_desc(op);
    matmuls += op->op == GGML_OP_MUL_MAT;
  }
  ggml_free(ctx);
  const auto after = npuflow_test::npuflow_stats(loaded_.npuflow_reg);
  EXPECT_EQ(after.supports_mul_mat_yes, before.supports_mul_mat_yes);
  EXPECT_EQ(after.supports_flash_attn_yes, before.supports_flash_attn_yes);
  EXPECT_EQ(after.supports_flash_attn_no - before.supports_flash_attn_no, 1);
  EXPECT_EQ(after.supports_mul_mat_id_yes, before.supports_mul_mat_id_yes);
  EXPECT_EQ(after.supports_mul_mat_id_no - before.supports_mul_mat_id_no, 1);
  // Every MUL_MAT the routing rules accept was declined by the idle policy, not by the rules.
  EXPECT_EQ(after.supports_mul_mat_declined - before.supports_mul_mat_declined, matmuls);
  EXPECT_EQ(after.mul_mat, 0);
  EXPECT_EQ(after.weights_packed, 0) << "idle packs nothing";

  // A backend can still be created (llama.cpp creates one for every ACCEL device) and freed.
  ggml_backend_t backend = ggml_backend_dev_init(loaded_.npuflow_dev, nullptr);
  ASSERT_NE(backend, nullptr);
  ggml_backend_free(backend);
}

TEST_F(OffBoard, SaysSoOnceAtInfo) {
  const std::string line =
      "npuflow [info] no NPU found: NPUFLOW stays idle (set NPUFLOW_DEVICE=host or sim to run it "
      "anyway)\n";
  const size_t first = load_log_.find(line);
  ASSERT_NE(first, std::string::npos) << load_log_;
  EXPECT_EQ(load_log_.find(line, first + 1), std::string::npos) << "said more than once";
  EXPECT_EQ(load_log_.find("NPUFLOW device ready"), std::string::npos) << load_log_;
}

}  // namespace
