// The opt-in float MatMul claim (NPUFLOW_FLOAT_MATMUL=int8): symmetric quantization's rounding,
// the per-row int8 kernel against the fp32 MatMul (seed 004's gate: <= 2% relative error) and
// bit-identical on host and sim, non-finite rows, and the matcher's claims and refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "encoder_test_graph.h"
#include "graph/float_matmul_matcher.h"
#include "host/host_device.h"
#include "quant/integer_matmul.h"
#include "quant/symmetric_quantization.h"
#include "sim/sim_device.h"

namespace npuflow {
namespace {

using encoder_test::TestGraph;

TEST(SymmetricQuantization, ColumnsScaleByTheirOwnMaximumAndRoundHalfToEven) {
  // Column 0: amax 127 (scale 1): 2.5 -> 2, -3.5 -> -4. Column 1: all zero, scale 1.
  const std::vector<float> w = {2.5f, 0.0f, -3.5f, 0.0f, 127.0f, 0.0f};
  const SymmetricColumns q = quantize_columns_symmetric(w.data(), 3, 2);
  EXPECT_EQ(q.scales, (std::vector<float>{1.0f, 1.0f}));
  EXPECT_EQ(std::vector<int>(q.values.begin(), q.values.end()),
            (std::vector<int>{2, 0, -4, 0, 127, 0}));
}

TEST(SymmetricQuantization, RowsReachPlusMinus127AndRefuseNonFiniteValues) {
  const std::vector<float> x = {-0.5f, 0.25f, 0.125f};
  std::vector<int8_t> q(3);
  float scale = 0;
  ASSERT_TRUE(quantize_row_symmetric(x.data(), 3, q.data(), &scale));
  EXPECT_EQ(scale, 0.5f / 127.0f);
  EXPECT_EQ(q[0], -127);
  EXPECT_EQ(q[1], 64);  // 63.5 rounds to even
  // The smallest subnormal: amax / 127 underflows to 0, so scale 1 and zeros, never 0 / 0.
  const std::vector<float> tiny = {std::numeric_limits<float>::denorm_min(), 0.0f, 0.0f};
  ASSERT_TRUE(quantize_row_symmetric(tiny.data(), 3, q.data(), &scale));
  EXPECT_EQ(scale, 1.0f);
  EXPECT_EQ(std::vector<int>(q.begin(), q.end()), (std::vector<int>{0, 0, 0}));
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), INFINITY}) {
    const std::vector<float> y = {1.0f, bad, 2.0f};
    q.assign(3, 9);
    EXPECT_FALSE(quantize_row_symmetric(y.data(), 3, q.data(), &scale));
    EXPECT_EQ(q[0], 9);  // untouched
  }
}

struct Problem {
  int64_t m, k, n;
  std::vector<float> x, w;
};

Problem random_problem(int64_t m, int64_t k, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Problem p{m, k, n, {}, {}};
  for (int64_t i = 0; i < m * k; ++i) p.x.push_back(normal(rng) * (1.0f + float(i % k) / k));
  for (int64_t i = 0; i < k * n; ++i) p.w.push_back(0.05f * normal(rng));
  return p;
}

std::vector<float> fp32_matmul(const Problem& p) {
  std::vector<float> y(static_cast<size_t>(p.m * p.n), 0.0f);
  for (int64_t r = 0; r < p.m; ++r)
    for (int64_t c = 0; c < p.n; ++c) {
      double s = 0;
      for (int64_t i = 0; i < p.k; ++i) s += double(p.x[r * p.k + i]) * p.w[i * p.n + c];
      y[r * p.n + c] = static_cast<float>(s);
    }
  return y;
}

std::unique_ptr<IntegerMatMul> kernel_for(const Problem& p, std::shared_ptr<Device> device) {
  const SymmetricColumns q = quantize_columns_symmetric(p.w.data(), p.k, p.n);
  IntegerMatMulSpec spec;
  spec.k = p.k;
  spec.n = p.n;
  spec.float_output = true;
  spec.w_zero_points = {0};
  spec.w_scales = q.scales;
  Logger quiet{LogLevel::kError, [](LogLevel, const std::string&) {}};
  auto kernel = IntegerMatMul::create("t", spec, q.values.data(), ElementType::kInt8,
                                      std::move(device), 1, quiet);
  EXPECT_TRUE(kernel.is_ok()) << kernel.status().to_string();
  return kernel.is_ok() ? std::move(kernel).value() : nullptr;
}

double relative_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / den);
}

TEST(FloatMatMulInt8, WithinTwoPercentOfFp32AndTheSameOnHostAndSim) {
  for (auto [m, k, n] : {std::tuple{1, 64, 32}, std::tuple{17, 96, 48}, std::tuple{64, 384, 128}}) {
    SCOPED_TRACE(testing::Message() << m << "x" << k << "x" << n);
    const Problem p = random_problem(m, k, n, static_cast<uint32_t>(m * 7 + k));
    const std::vector<float> want = fp32_matmul(p);
    auto host = kernel_for(p, std::make_shared<HostDevice>(DeviceOptions{}));
    auto sim = kernel_for(p, std::make_shared<sim::SimDevice>(sim::SimOptions{}));
    ASSERT_TRUE(host && sim);
    std::vector<float> on_host(want.size()), on_sim(want.size());
    ASSERT_TRUE(host->run_rows(p.x.data(), m, on_host.data(), {}).is_ok());
    ASSERT_TRUE(sim->run_rows(p.x.data(), m, on_sim.data(), {}).is_ok());
    EXPECT_EQ(on_host, on_sim);  // exact integers and one epilogue: bit for bit
    EXPECT_EQ(sim->counters().device_calls.load(), 1);
    // Per output row, as the seed's gate reads; int8 on both sides leaves about 0.5-1%.
    for (int64_t r = 0; r < m; ++r) {
      const std::vector<float> got_row(on_host.begin() + r * n, on_host.begin() + (r + 1) * n);
      const std::vector<float> want_row(want.begin() + r * n, want.begin() + (r + 1) * n);
      const double error = relative_l2(got_row, want_row);
      EXPECT_LE(error, 0.02) << "row " << r;
      EXPECT_GT(error, 0.0) << "row " << r << " is exact: not quantized?";
    }
  }
}

TEST(FloatMatMulInt8, ANonFiniteRowPropagatesAsAFloatMatMulAndSparesTheOthers) {
  Problem p = random_problem(4, 64, 16, 3);
  p.x[1 * 64 + 5] = std::numeric_limits<float>::quiet_NaN();
  p.x[2 * 64 + 9] = INFINITY;
  const std::vector<float> want = fp32_matmul(p);
  // Such a row runs in fp32 against the dequantized weight: its NaN and infinities are that
  // product's (a weight that quantized to 0 turns Inf * w into NaN there, as it would in fp32).
  Problem dequantized = p;
  const SymmetricColumns q = quantize_columns_symmetric(p.w.data(), p.k, p.n);
  for (int64_t i = 0; i < p.k * p.n; ++i) dequantized.w[i] = float(q.values[i]) * q.scales[i % p.n];
  const std::vector<float> want_dequantized = fp32_matmul(dequantized);
  auto kernel = kernel_for(p, std::make_shared<HostDevice>(DeviceOptions{}));
  ASSERT_TRUE(kernel);
  std::vector<float> y(want.size());
  ASSERT_TRUE(kernel->run_rows(p.x.data(), 4, y.data(), {}).is_ok());
  int infinities = 0;
  for (int64_t c = 0; c < 16; ++c) {
    EXPECT_TRUE(std::isnan(y[1 * 16 + c])) << c;
    const float inf_row = y[2 * 16 + c], inf_want = want_dequantized[2 * 16 + c];
    EXPECT_EQ(std::isnan(inf_row), std::isnan(inf_want)) << c;
    if (!std::isnan(inf_want)) {
      EXPECT_EQ(inf_row, inf_want) << c;
    }
    infinities += std::isinf(inf_row) ? 1 : 0;
    for (int64_t r : {0, 3}) {
      EXPECT_NEAR(y[r * 16 + c], want[r * 16 + c], 0.05 * (1 + std::fabs(want[r * 16 + c])));
    }
  }
  EXPECT_GT(infinities, 0);
}

// x [2, T, K] -> MatMul(W) -> y, with the weight's form changed by each refusal case.
struct FloatGraph {
  TestGraph g;
  ValueId x, y;
  NodeId matmul;
};

void build(FloatGraph& f, ValueId weight, int64_t n, int64_t k = 32) {
  f.x = f.g.input({2, -1, k});
  f.y = f.g.op("MatMul", {f.x, weight}, {2, -1, n});
  f.matmul = f.g.producer(f.y);
  f.g.output(f.y);
}

TEST(FloatMatMulMatcher, ClaimsAConstantWeightMatMulAsOneInt8Node) {
  FloatGraph f;
  build(f, f.g.weight({32, 16}, "w"), 16);
  const ClaimSet set = match_float_matmuls(f.g.graph, {});
  ASSERT_EQ(set.claims.size(), 1u);
  EXPECT_EQ(set.candidates, 1);
  const Claim& claim = set.claims[0];
  EXPECT_EQ(claim.kind, ClaimKind::kFloatMatMul);
  EXPECT_EQ(claim.nodes, std::vector<NodeId>{f.matmul});
  EXPECT_TRUE(claim.integer.quantize_rows);
  EXPECT_EQ(claim.integer.weight_name, "w");
  EXPECT_EQ(claim.integer.activation_name, f.g.name(f.x));
  EXPECT_EQ(claim.integer.output_name, f.g.name(f.y));
  EXPECT_EQ(claim.integer.spec.k, 32);
  EXPECT_EQ(claim.integer.spec.n, 16);
  ASSERT_EQ(claim.work.size(), 1u);
  EXPECT_EQ(claim.work[0].type, ElementType::kInt8);
}

TEST(FloatMatMulMatcher, LeavesNodesOtherClaimsHold) {
  FloatGraph f;
  build(f, f.g.weight({32, 16}), 16);
  const ClaimSet set = match_float_matmuls(f.g.graph, {f.matmul});
  EXPECT_EQ(set.candidates, 0);
  EXPECT_TRUE(set.claims.empty());
}

TEST(FloatMatMulMatcher, RefusesWhatAnInt8GemmCannotStandFor) {
  auto refusal = [](auto make_weight, int64_t k = 32) {
    FloatGraph f;
    build(f, make_weight(f.g), 16, k);
    const ClaimSet set = match_float_matmuls(f.g.graph, {});
    EXPECT_TRUE(set.claims.empty());
    return set.refusals.size() == 1 ? set.refusals[0].reason : std::string("none");
  };
  EXPECT_EQ(refusal([](TestGraph& g) { return g.input({32, 16}); }), "weight_not_constant");
  EXPECT_EQ(refusal([](TestGraph& g) {
              std::vector<float> w(32 * 16, 0.1f);
              w[7] = std::numeric_limits<float>::quiet_NaN();
              return g.floats({32, 16}, w);
            }),
            "weight_not_finite");
  EXPECT_EQ(refusal([](TestGraph& g) { return g.weight({2, 32, 16}); }), "weight_rank");
  EXPECT_EQ(
      refusal([](TestGraph& g) {
        return g.constant<int32_t>({32, 16}, ElementType::kInt32, std::vector<int32_t>(32 * 16, 5));
      }),
      "unsupported_type");
  EXPECT_EQ(refusal([](TestGraph& g) { return g.weight({32, 16}); }, 24), "activation_shape");
}

}  // namespace
}  // namespace npuflow
