// The host encoder's vector kernels (tiled attention, LayerNorm, the GELU forms, the gated
// product) against double-precision references, on every path: the AVX2 kernels and the AVX-512
// attention tiles where this CPU has them, and the portable loops (forced), at shapes that leave
// tails in every tile.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <iterator>
#include <random>
#include <thread>
#include <vector>

#include "ops/host_attention.h"
#include "ops/simd.h"
#include "ops/vector_math.h"
#include "two_thread_pool.h"

namespace npuflow {
namespace {

// Runs the body once per kernel path this machine has: portable, AVX2 where present, and
// AVX-512 (the attention tiles) where present.
template <typename Body>
void for_each_path(Body body) {
  allow_avx2_kernels(false);
  {
    SCOPED_TRACE("portable loops");
    body();
  }
  allow_avx2_kernels(true);
  allow_avx512_kernels(false);
  if (avx2_kernels_active()) {
    SCOPED_TRACE("AVX2 kernels");
    body();
  }
  allow_avx512_kernels(true);
  if (avx512_kernels_active()) {
    SCOPED_TRACE("AVX-512 kernels");
    body();
  }
}

std::vector<float> normal(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// The largest |a - b| / (1 + |b|): fp32 rounding of values of any size; NaN where b has NaN.
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d =
        std::abs(static_cast<double>(a[i]) - b[i]) / (1.0 + std::abs(static_cast<double>(b[i])));
    if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
    if (!std::isnan(d)) worst = std::max(worst, d);
  }
  return worst;
}

struct AttentionCase {
  int64_t tokens, heads, head_dim;
};

TEST(HostKernels, AttentionMatchesTheDoubleReferenceAtEveryTail) {
  std::mt19937 rng(7);
  // Token counts around the 32-query block and the 8/16-key tiles; head dims with 8- and 16-wide
  // tiles and scalar tails.
  for (AttentionCase c : {AttentionCase{1, 1, 8},
                          {5, 2, 4},
                          {37, 3, 20},
                          {70, 2, 64},
                          {33, 4, 16},
                          {17, 1, 12},
                          {130, 6, 64}}) {
    SCOPED_TRACE(testing::Message() << c.tokens << " tokens, " << c.heads << "x" << c.head_dim);
    const int64_t d = c.heads * c.head_dim;
    const auto qkv = normal(static_cast<size_t>(c.tokens * 3 * d), rng);
    std::vector<float> want(static_cast<size_t>(c.tokens * d));
    host_attention_reference(qkv.data(), {c.tokens, d, c.heads}, 0.3f, {}, false, want.data());
    for_each_path([&] {
      for (const ExecContext& context : {ExecContext{}, two_threads()}) {
        std::vector<float> got(want.size(), NAN);
        host_attention(qkv.data(), {c.tokens, d, c.heads}, 0.3f, {}, false, got.data(), context);
        EXPECT_LT(max_abs_diff(got, want), 2e-6);
      }
    });
  }
}

// The AVX-512 tiles compute each output as the AVX2 ones do (the same fused multiply-adds in the
// same order), so the two paths agree to the bit, at head dims past 64 and off the 16-lane width.
TEST(HostKernels, AttentionAvx512TilesMatchTheAvx2KernelsBitForBit) {
  allow_avx512_kernels(true);
  if (!avx512_kernels_active()) GTEST_SKIP() << "this CPU has no AVX-512";
  std::mt19937 rng(19);
  for (AttentionCase c : {AttentionCase{1, 1, 8},
                          {9, 2, 4},
                          {45, 3, 20},
                          {77, 2, 64},
                          {40, 2, 80},
                          {50, 1, 128},
                          {33, 4, 24},
                          {130, 6, 64}}) {
    SCOPED_TRACE(testing::Message() << c.tokens << " tokens, " << c.heads << "x" << c.head_dim);
    const int64_t d = c.heads * c.head_dim;
    const auto qkv = normal(static_cast<size_t>(c.tokens * 3 * d), rng);
    std::vector<float> avx2(static_cast<size_t>(c.tokens * d), NAN), avx512(avx2);
    allow_avx512_kernels(false);
    host_attention(qkv.data(), {c.tokens, d, c.heads}, 0.3f, {}, false, avx2.data(), two_threads());
    allow_avx512_kernels(true);
    host_attention(qkv.data(), {c.tokens, d, c.heads}, 0.3f, {}, false, avx512.data(),
                   two_threads());
    for (size_t i = 0; i < avx2.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(avx2[i]), std::bit_cast<uint32_t>(avx512[i])) << i;
    }
  }
}

TEST(HostKernels, AttentionBiasBroadcastsAndMaskedRows) {
  std::mt19937 rng(11);
  const int64_t tokens = 41, heads = 3, dh = 16, d = heads * dh;
  const auto qkv = normal(static_cast<size_t>(tokens * 3 * d), rng);
  // A [heads, T, T] bias and a key-padding [1, 1, 1, T] one (column stride 1, rows shared), and a
  // per-row [T, 1] one (column stride 0); the key mask fully masks query row 0 in every head.
  auto full = normal(static_cast<size_t>(heads * tokens * tokens), rng);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < tokens; ++j)
      full[static_cast<size_t>((h * tokens) * tokens + j)] = -INFINITY;
  auto keys = normal(static_cast<size_t>(tokens), rng);
  keys[3] = -INFINITY;
  const auto rows = normal(static_cast<size_t>(tokens), rng);
  const AttentionBias biases[] = {
      {full.data(), tokens * tokens, tokens, 1}, {keys.data(), 0, 0, 1}, {rows.data(), 0, 1, 0}};
  for (const AttentionBias& bias : biases) {
    for (bool nan_to_zero : {false, true}) {
      std::vector<float> want(static_cast<size_t>(tokens * d));
      host_attention_reference(qkv.data(), {tokens, d, heads}, 0.25f, bias, nan_to_zero,
                               want.data());
      for_each_path([&] {
        std::vector<float> got(want.size(), 123.0f);
        host_attention(qkv.data(), {tokens, d, heads}, 0.25f, bias, nan_to_zero, got.data(),
                       two_threads());
        EXPECT_LT(max_abs_diff(got, want), 2e-6);
      });
    }
  }
  // The masked rows really are NaN without nan_to_zero and 0 with it (the comparison above
  // requires NaN in the same places).
  std::vector<float> out(static_cast<size_t>(tokens * d));
  host_attention(qkv.data(), {tokens, d, heads}, 0.25f, biases[0], true, out.data(), {});
  EXPECT_EQ(out[0], 0.0f);
  host_attention(qkv.data(), {tokens, d, heads}, 0.25f, biases[0], false, out.data(), {});
  EXPECT_TRUE(std::isnan(out[0]));
}

TEST(HostKernels, LayerNormMatchesDouble) {
  std::mt19937 rng(3);
  for (int64_t d : {1, 7, 64, 100, 384}) {
    const int64_t rows = 9;
    auto x = normal(static_cast<size_t>(rows * d), rng, 3.0f);
    for (float& v : x) v += 5.0f;  // an offset the centred second pass must not lose
    const auto gamma = normal(static_cast<size_t>(d), rng);
    const auto beta = normal(static_cast<size_t>(d), rng);
    for (bool with_beta : {false, true}) {
      std::vector<float> want(x.size());
      for (int64_t r = 0; r < rows; ++r) {
        double mean = 0, var = 0;
        for (int64_t i = 0; i < d; ++i) mean += x[static_cast<size_t>(r * d + i)];
        mean /= static_cast<double>(d);
        for (int64_t i = 0; i < d; ++i) {
          const double c = x[static_cast<size_t>(r * d + i)] - mean;
          var += c * c;
        }
        const double inv = 1.0 / std::sqrt(var / static_cast<double>(d) + 1e-5);
        for (int64_t i = 0; i < d; ++i) {
          const size_t k = static_cast<size_t>(r * d + i);
          want[k] = static_cast<float>((x[k] - mean) * inv * gamma[static_cast<size_t>(i)] +
                                       (with_beta ? beta[static_cast<size_t>(i)] : 0.0));
        }
      }
      for_each_path([&] {
        std::vector<float> got(x.size());
        layer_norm(x.data(), rows, d, gamma.data(), with_beta ? beta.data() : nullptr, 1e-5f,
                   got.data(), two_threads());
        EXPECT_LT(max_abs_diff(got, want), 2e-5) << "d=" << d;
        // In place, as the post-LN blocks call it.
        std::vector<float> in_place = x;
        layer_norm(in_place.data(), rows, d, gamma.data(), with_beta ? beta.data() : nullptr, 1e-5f,
                   in_place.data(), {});
        EXPECT_EQ(in_place, got);
      });
    }
  }
}

// Rows whose statistics leave fp32's range: ONNX's LayerNormalization (and the decomposed form
// the CPU EP runs op by op) computes the mean and the variance in fp32, so deviations whose
// squares sum past FLT_MAX give an infinite variance and the row comes out as beta, and a sum past
// FLT_MAX gives an infinite mean and a NaN row. Both kernel paths must give exactly that; the
// portable loops once normalized such rows in double (a fuzzer find: 1e30 MLP weights).
TEST(HostKernels, LayerNormOverflowsAsFp32Statistics) {
  std::mt19937 rng(13);
  const int64_t d = 64;
  const auto gamma = normal(static_cast<size_t>(d), rng);
  const auto beta = normal(static_cast<size_t>(d), rng);
  const auto unit = normal(static_cast<size_t>(d), rng);
  enum class Want { kNormalized, kBeta, kNan };
  struct Row {
    float scale, offset;
    Want want;
  };
  // Squares of 1e18 deviations sum to ~6e37 (finite); of 3e18 each is finite but the sum is not;
  // of 1e30 each overflows; 1e37 on every element overflows the sum, hence the mean.
  const Row rows[] = {{1.0f, 5.0f, Want::kNormalized}, {1e18f, 0.0f, Want::kNormalized},
                      {3e18f, 0.0f, Want::kBeta},      {1e30f, 0.0f, Want::kBeta},
                      {-1e30f, 2e30f, Want::kBeta},    {1e30f, 1e37f, Want::kNan}};
  const int64_t count = static_cast<int64_t>(std::size(rows));
  std::vector<float> x;
  for (const Row& row : rows)
    for (float u : unit) x.push_back(row.offset + row.scale * u);
  for_each_path([&] {
    std::vector<float> got(x.size());
    layer_norm(x.data(), count, d, gamma.data(), beta.data(), 1e-6f, got.data(), two_threads());
    for (int64_t r = 0; r < count; ++r) {
      SCOPED_TRACE(testing::Message() << "row " << r);
      const float* y = got.data() + r * d;
      const float* in = x.data() + r * d;
      // The fp32 evaluation, op by op as ONNX defines it.
      float sum = 0, squares = 0;
      for (int64_t i = 0; i < d; ++i) sum += in[i];
      const float mean = sum / static_cast<float>(d);
      for (int64_t i = 0; i < d; ++i) squares += (in[i] - mean) * (in[i] - mean);
      const float sd = std::sqrt(squares / static_cast<float>(d) + 1e-6f);
      for (int64_t i = 0; i < d; ++i) {
        const size_t k = static_cast<size_t>(i);
        switch (rows[r].want) {
          case Want::kNormalized:
            ASSERT_TRUE(std::isfinite(sd));
            EXPECT_NEAR(y[i], (in[i] - mean) / sd * gamma[k] + beta[k], 2e-5);
            break;
          case Want::kBeta:
            ASSERT_TRUE(std::isinf(sd) && std::isfinite(mean));
            EXPECT_EQ(y[i], beta[k]);
            break;
          case Want::kNan:
            ASSERT_TRUE(std::isinf(mean));
            EXPECT_TRUE(std::isnan(y[i])) << y[i];
            break;
        }
      }
    }
  });
}

// host_kernels=portable holds for the encoder run on the thread that started it (the kernels read
// it there before fanning out), nests, and ends with its scope.
TEST(HostKernels, ScopedPortableKernelsHoldOnTheirThreadOnly) {
  const bool cpu_choice = avx2_kernels_active();
  {
    const ScopedPortableKernels portable(true);
    EXPECT_FALSE(avx2_kernels_active());
    bool elsewhere = !cpu_choice;
    std::thread other([&] { elsewhere = avx2_kernels_active(); });
    other.join();
    EXPECT_EQ(elsewhere, cpu_choice);
    {
      const ScopedPortableKernels inner(false);
      EXPECT_FALSE(avx2_kernels_active());
    }
    EXPECT_FALSE(avx2_kernels_active());
  }
  EXPECT_EQ(avx2_kernels_active(), cpu_choice);
  const ScopedPortableKernels not_portable(false);
  EXPECT_EQ(avx2_kernels_active(), cpu_choice);
}

double activation_reference(VectorActivation kind, double x) {
  switch (kind) {
    case VectorActivation::kGeluErf:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case VectorActivation::kGeluTanh:
      return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    case VectorActivation::kQuickGelu:
      return x / (1.0 + std::exp(-1.702 * x));
  }
  return x;
}

TEST(HostKernels, ActivationsMatchDoubleOverTheirRange) {
  // -12..12 in fine steps (both saturations and the curved middle), plus extremes.
  std::vector<float> x;
  for (int i = -12000; i <= 12000; ++i) x.push_back(static_cast<float>(i) * 1e-3f);
  for (float v : {-100.0f, -90.0f, 90.0f, 100.0f, 0.0f, -0.0f}) x.push_back(v);
  const int64_t cols = 37, rows = static_cast<int64_t>(x.size()) / cols;
  x.resize(static_cast<size_t>(rows * cols));
  for (VectorActivation kind :
       {VectorActivation::kGeluErf, VectorActivation::kGeluTanh, VectorActivation::kQuickGelu}) {
    for_each_path([&] {
      std::vector<float> got(x.size());
      activate_rows(kind, x.data(), cols, got.data(), cols, rows, cols, two_threads());
      for (size_t i = 0; i < x.size(); ++i) {
        const double want = activation_reference(kind, x[i]);
        // 2e-7 of the input's scale: the erf polynomial's bound, well inside the gates.
        ASSERT_NEAR(got[i], want, 2e-7 * std::max(1.0, std::abs(static_cast<double>(x[i]))) + 1e-7)
            << "x=" << x[i] << " kind=" << static_cast<int>(kind);
      }
    });
  }
}

TEST(HostKernels, GatedActivationInPlaceRowByRow) {
  std::mt19937 rng(5);
  const int64_t rows = 6, cols = 21;
  const auto x = normal(static_cast<size_t>(rows * 2 * cols), rng, 2.0f);
  for (bool act_first : {true, false}) {
    const int64_t act_at = act_first ? 0 : cols, gate_at = act_first ? cols : 0;
    for_each_path([&] {
      std::vector<float> buffer = x;  // y starts where x does, as the encoder plan calls it
      gated_activation(VectorActivation::kGeluErf, buffer.data(), act_at, gate_at, buffer.data(),
                       rows, cols);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < cols; ++i) {
          const float a = x[static_cast<size_t>(r * 2 * cols + act_at + i)];
          const float g = x[static_cast<size_t>(r * 2 * cols + gate_at + i)];
          const double want = activation_reference(VectorActivation::kGeluErf, a) * g;
          EXPECT_NEAR(buffer[static_cast<size_t>(r * cols + i)], want,
                      1e-6 * std::max(1.0, std::abs(want)));
        }
      }
    });
  }
}

}  // namespace
}  // namespace npuflow
