// The fast (float32) requantization kernel against the exact (double) one, value for value, on
// seeded random rows built to land on and near rounding ties. The release build checks 10^9
// values; sanitizer builds 10^8 (they run ~10x slower). NPUFLOW_REQUANTIZE_VALUES overrides it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "quant/qdq_epilogue.h"
#include "quant/requantize_rows.h"

namespace npuflow {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int64_t kDefaultValues = 100'000'000;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr int64_t kDefaultValues = 100'000'000;
#else
constexpr int64_t kDefaultValues = 1'000'000'000;
#endif
#else
constexpr int64_t kDefaultValues = 1'000'000'000;
#endif

int64_t values_to_check() {
  const char* text = std::getenv("NPUFLOW_REQUANTIZE_VALUES");
  return text != nullptr ? std::stoll(text) : kDefaultValues;
}

// splitmix64: cheap enough that generating 10^9 values does not dominate the test.
struct Random {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  int64_t in(int64_t lo, int64_t hi) {  // inclusive
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
  double unit() { return static_cast<double>(next() >> 11) * 0x1p-53; }
  double log_uniform(double lo_exp, double hi_exp) {
    return std::exp2(lo_exp + (hi_exp - lo_exp) * unit()) * (next() & 1 ? 1.0 : -1.0);
  }
};

enum class Mode { kNearTies, kExactTies, kInRange, kWide };

// One row: the kernel's terms and the buffers behind them, consistent with a true acc' that fits
// in int32 (the precondition the epilogue proves from K and the zero points).
struct Row {
  std::vector<int32_t> acc;
  std::vector<double> bias, zp_w, multiplier;
  std::vector<uint32_t> bias_bits, zp_w_bits;
  std::vector<float> multiplier_float;
  std::vector<int64_t> true_acc;  // acc', for the naive-float count
  int64_t row_sum = 0;
  RequantizeOutput output;

  RequantizeRowTerms terms() const {
    RequantizeRowTerms t;
    t.acc = acc.data();
    t.cols = static_cast<int64_t>(acc.size());
    t.column_bias = bias.data();
    t.zp_w = zp_w.data();
    t.row_sum = static_cast<double>(row_sum);
    t.multiplier = multiplier.data();
    t.column_bias_bits = bias_bits.data();
    t.zp_w_bits = zp_w_bits.data();
    t.row_sum_bits = static_cast<uint32_t>(row_sum);
    t.multiplier_float = multiplier_float.data();
    return t;
  }
};

double row_multiplier(Random& rng, Mode mode) {
  switch (mode) {
    case Mode::kNearTies:
      return rng.log_uniform(-24, 3);
    case Mode::kExactTies:
      return std::exp2(-static_cast<double>(rng.in(0, 20)));
    case Mode::kInRange:
      return rng.log_uniform(-30, 4);
    case Mode::kWide: {
      const int64_t pick = rng.in(0, 15);
      if (pick == 0) return 0.0;
      if (pick == 1) return 0x1p-100;
      if (pick == 2) return -0x1p64;
      return rng.log_uniform(-100, 64);
    }
  }
  return 1.0;
}

Mode fill_row(Random& rng, Row& row) {
  const auto mode = static_cast<Mode>(rng.in(0, 3));
  const int64_t cols = rng.in(1, 300);
  const int64_t k = rng.in(1, 4096);
  const int64_t max_acc = k * 255 * 255;
  row.row_sum = rng.in(-128 * k, 255 * k);
  for (auto* v : {&row.bias, &row.zp_w, &row.multiplier}) v->resize(cols);
  row.acc.resize(cols);
  row.bias_bits.resize(cols);
  row.zp_w_bits.resize(cols);
  row.multiplier_float.resize(cols);
  row.true_acc.resize(cols);
  // One multiplier per row or one per column, as per-tensor and per-channel weights give.
  const bool per_column = (rng.next() & 1) != 0;
  double m = row_multiplier(rng, mode);
  for (int64_t c = 0; c < cols; ++c) {
    if (per_column) m = row_multiplier(rng, mode);
    int64_t target = 0;
    switch (mode) {
      case Mode::kNearTies: {
        const double half = static_cast<double>(rng.in(-300, 300)) + 0.5;
        target = std::llround(half / m) + rng.in(-2, 2);
        break;
      }
      case Mode::kExactTies: {
        const int64_t shift = static_cast<int64_t>(std::llround(-std::log2(std::fabs(m))));
        const int64_t odd = 2 * rng.in(-300, 300) + 1;
        target = shift == 0 ? rng.in(-300, 300) : odd * (int64_t{1} << (shift - 1));
        break;
      }
      case Mode::kInRange: {
        const auto reach = static_cast<int64_t>(std::min<double>(600.0 / std::fabs(m), 1e12));
        target = rng.in(-reach, reach);
        break;
      }
      case Mode::kWide:
        target = rng.in(-max_acc, max_acc);
        break;
    }
    target = std::clamp(target, -max_acc, max_acc);
    const int64_t zp_w = rng.in(-128, 127);
    const int64_t bias = rng.in(-255 * 128 * k, 255 * 128 * k);
    const int64_t acc = target - bias + zp_w * row.row_sum;
    row.acc[c] = static_cast<int32_t>(acc);  // |acc| < 2^31 for K <= 4096
    row.true_acc[c] = target;
    row.bias[c] = static_cast<double>(bias);
    row.zp_w[c] = static_cast<double>(zp_w);
    row.bias_bits[c] = static_cast<uint32_t>(bias);
    row.zp_w_bits[c] = static_cast<uint32_t>(zp_w);
    row.multiplier[c] = m;
    row.multiplier_float[c] = static_cast<float>(m);
  }
  return mode;
}

// What a float32 kernel without the tie test would give: the cases the exact path is there for.
int32_t naive_float_value(int64_t true_acc, float multiplier, const RequantizeOutput& output) {
  float f = static_cast<float>(true_acc) * multiplier;
  f = std::clamp(f, -4096.0f, 4096.0f);
  const auto rounded = static_cast<int32_t>(std::nearbyint(f)) + output.zero_point;
  return std::clamp(rounded, output.is_unsigned ? 0 : -128, output.is_unsigned ? 255 : 127);
}

int32_t output_value(const std::vector<uint8_t>& out, int64_t c, const RequantizeOutput& o) {
  return o.is_unsigned ? out[c] : static_cast<int8_t>(out[c]);
}

TEST(RequantizeRows, FastKernelIsBitIdenticalToTheExactOne) {
  const int64_t wanted = values_to_check();
  Random rng{20261201};
  Row row;
  std::vector<uint8_t> exact(300), fast(300);
  int64_t checked = 0, redone = 0, naive_wrong = 0, exact_ties = 0;
  int64_t in_range_checked = 0, in_range_redone = 0;
  while (checked < wanted) {
    const Mode mode = fill_row(rng, row);
    const RequantizeRowTerms terms = row.terms();
    for (int64_t c = 0; c < terms.cols; ++c) {
      const double scaled = static_cast<double>(row.true_acc[c]) * row.multiplier[c];
      if (scaled - std::floor(scaled) == 0.5) ++exact_ties;
    }
    // Each row under four outputs (signedness, zero point): generating rows is the slow part.
    for (int variant = 0; variant < 4; ++variant) {
      row.output.is_unsigned = (variant & 1) != 0;
      row.output.zero_point =
          static_cast<int32_t>(row.output.is_unsigned ? rng.in(0, 255) : rng.in(-128, 127));
      requantize_row_exact(terms, row.output, exact.data());
      const int64_t row_redone = requantize_row_fast(terms, row.output, fast.data());
      redone += row_redone;
      for (int64_t c = 0; c < terms.cols; ++c) {
        ASSERT_EQ(output_value(fast, c, row.output), output_value(exact, c, row.output))
            << "value " << checked + c << ": acc' " << row.true_acc[c] << " multiplier "
            << row.multiplier[c] << " zero point " << row.output.zero_point;
      }
      // Sampled: the naive count only has to show the tie test is needed.
      if ((checked & 0xFF) < 16) {
        for (int64_t c = 0; c < terms.cols; ++c) {
          naive_wrong += naive_float_value(row.true_acc[c], row.multiplier_float[c], row.output) !=
                         output_value(exact, c, row.output);
        }
      }
      if (mode == Mode::kInRange) {
        in_range_checked += terms.cols;
        in_range_redone += row_redone;
      }
      checked += terms.cols;
    }
  }
  std::printf(
      "requantize: %lld values, %lld redone in double (%.2e; %.2e of the in-range rows), "
      "%lld exact ties, %lld naive-float misroundings in the sampled rows\n",
      static_cast<long long>(checked), static_cast<long long>(redone),
      static_cast<double>(redone) / static_cast<double>(checked),
      static_cast<double>(in_range_redone) / static_cast<double>(in_range_checked),
      static_cast<long long>(exact_ties), static_cast<long long>(naive_wrong));
  EXPECT_GE(checked, wanted);
  // The test reaches the cases it is about: ties, the double path, and float results that would
  // be wrong without it.
  EXPECT_GT(exact_ties, 0);
  EXPECT_GT(redone, 0);
  EXPECT_GT(naive_wrong, 0);
  // Off the constructed ties, the fast path does nearly all the work.
  EXPECT_LT(in_range_redone, in_range_checked / 1000);
}

QdqGemmSpec spec_of(int64_t k, int32_t zp_x, float s_x, float s_w, float s_y) {
  QdqGemmSpec spec;
  spec.k = k;
  spec.n = 4;
  spec.x_scale = s_x;
  spec.x_zero_point = zp_x;
  spec.w_scales = {s_w};
  spec.w_zero_points = {0};
  spec.output = QuantizedOutput{s_y, 0, ElementType::kInt8};
  return spec;
}

TEST(RequantizeRows, EpilogueTakesTheFastKernelOnlyWhereItIsProvablyExact) {
  auto uses_fast = [](const QdqGemmSpec& spec) {
    const std::vector<int8_t> weight(static_cast<size_t>(spec.k * spec.n), 1);
    return QdqEpilogue(spec, weight.data()).fast_requantize();
  };
  EXPECT_TRUE(uses_fast(spec_of(4096, 3, 0.02f, 0.01f, 0.1f)));
  EXPECT_TRUE(uses_fast(spec_of(60000, 0, 0.02f, 0.01f, 0.1f)));
  // K * 255 * 128 past 2^31: the 32-bit accumulator of acc' could wrap.
  EXPECT_FALSE(uses_fast(spec_of(70000, 0, 0.02f, 0.01f, 0.1f)));
  // A multiplier whose float would be subnormal: its rounding error is not relative any more.
  EXPECT_FALSE(uses_fast(spec_of(64, 0, 1e-30f, 1e-30f, 1.0f)));
  // Float output has no requantization at all.
  QdqGemmSpec float_out = spec_of(64, 0, 0.02f, 0.01f, 0.1f);
  float_out.output.reset();
  EXPECT_FALSE(uses_fast(float_out));
}

TEST(RequantizeRows, AccumulatorBoundFollowsTheZeroPoints) {
  EXPECT_TRUE(accumulators_fit_int32(50000, 0, max_weight_offset(0)));
  EXPECT_FALSE(accumulators_fit_int32(50000, -128, max_weight_offset(0)));  // |a - zp| up to 383
  EXPECT_FALSE(accumulators_fit_int32(50000, 0, max_weight_offset(-128)));  // |w - zp| up to 255
  EXPECT_FALSE(accumulators_fit_int32(1 << 20, 0, max_weight_offset(0)));
  EXPECT_TRUE(accumulators_fit_int32(0, 0, max_weight_offset(0)));
  EXPECT_EQ(max_weight_offset(0), 128);
  EXPECT_EQ(max_weight_offset(-128), 255);
}

}  // namespace
}  // namespace npuflow
