#include "quant/requantize_rows.h"

#include <algorithm>
#include <cmath>

#include "core/target_clones.h"
#include "quant/round_half_even.h"

namespace npuflow {

namespace {

// Every value past +-4096 saturates (the widest output range less its zero point is [-255, 255]);
// below 4096 a float's ulp is at most 2^-11, so the tie test below stays meaningful.
constexpr float kFastClamp = 4096.0f;

// float(acc'), float(multiplier) and their product each round once (relative 2^-24 each), so
// |f - double product| <= ~3 * 2^-24 * |f|. Twice that is the margin taken.
constexpr float kTieMargin = 4.76837158203125e-07f;  // 2^-21

// On x86-64 the row kernels are cloned for AVX-512 and AVX2 machines (core/target_clones.h).

// One value of the exact kernel. Every quantity is an integer below 2^53 until the multiply, so
// the double sums are exact (a contracted multiply-add gives the same) and the only rounding is
// the final one.
inline double exact_product(const RequantizeRowTerms& t, int64_t c) {
  return (static_cast<double>(t.acc[c]) + (t.column_bias[c] - t.zp_w[c] * t.row_sum)) *
         t.multiplier[c];
}

inline int32_t exact_value(const RequantizeRowTerms& t, int64_t c, double lo, double hi) {
  double v = exact_product(t, c);
  v = std::min(std::max(v, -1048576.0), 1048576.0);
  v = round_half_even(v);                                      // |v| <= 2^20
  return static_cast<int32_t>(std::min(std::max(v, lo), hi));  // [type min - zp, type max - zp]
}

template <typename Out>
NPUFLOW_CLONED_TEMPLATE void exact_row(const RequantizeRowTerms& t, double lo, double hi,
                                       int32_t zero_point, Out* __restrict out) {
  for (int64_t c = 0; c < t.cols; ++c)
    out[c] = static_cast<Out>(exact_value(t, c, lo, hi) + zero_point);
}

template <typename Out>
NPUFLOW_CLONED_TEMPLATE int64_t fast_row(const RequantizeRowTerms& t, float lo, float hi,
                                         int32_t zero_point, Out* __restrict out) {
  constexpr int64_t kChunk = 64;
  const int32_t* __restrict acc = t.acc;
  const uint32_t* __restrict bias = t.column_bias_bits;
  const uint32_t* __restrict zp_w = t.zp_w_bits;
  const float* __restrict multiplier = t.multiplier_float;
  const uint32_t row_sum = t.row_sum_bits;
  int64_t redone = 0;
  for (int64_t base = 0; base < t.cols; base += kChunk) {
    const int64_t len = std::min(kChunk, t.cols - base);
    int32_t near_tie[kChunk];
    int32_t any_near = 0;
    for (int64_t c = 0; c < len; ++c) {
      const int64_t i = base + c;
      // Wrapping 32-bit arithmetic: exact, since the true acc' fits in int32.
      const uint32_t bits = static_cast<uint32_t>(acc[i]) + bias[i] - zp_w[i] * row_sum;
      float f = static_cast<float>(static_cast<int32_t>(bits)) * multiplier[i];
      f = std::min(std::max(f, -kFastClamp), kFastClamp);
      const float rounded = round_half_even(f);  // |f| <= 4096
      // f - rounded is exact (|f| <= 4096, they differ by at most 1/2).
      const float to_half = 0.5f - std::fabs(f - rounded);
      const int32_t is_near = to_half <= std::fabs(f) * kTieMargin ? 1 : 0;
      near_tie[c] = is_near;
      any_near |= is_near;
      out[i] =
          static_cast<Out>(static_cast<int32_t>(std::min(std::max(rounded, lo), hi)) + zero_point);
    }
    if (any_near == 0) continue;
    for (int64_t c = 0; c < len; ++c) {
      if (near_tie[c] == 0) continue;
      out[base + c] = static_cast<Out>(exact_value(t, base + c, lo, hi) + zero_point);
      ++redone;
    }
  }
  return redone;
}

double lowest(const RequantizeOutput& o) {
  return (o.is_unsigned ? 0.0 : -128.0) - o.zero_point;
}
double highest(const RequantizeOutput& o) {
  return (o.is_unsigned ? 255.0 : 127.0) - o.zero_point;
}

}  // namespace

bool accumulators_fit_int32(int64_t k, int64_t activation_zero_point, int64_t max_weight_offset) {
  // Activations are int8 or uint8: anywhere in [-128, 255] covers both.
  const int64_t max_activation =
      std::max(std::llabs(-128 - activation_zero_point), std::llabs(255 - activation_zero_point));
  if (k <= 0 || max_activation > 65536 || max_weight_offset > 65536) return k == 0;
  return k <= (int64_t{1} << 31) / (max_activation * std::max<int64_t>(max_weight_offset, 1)) - 1;
}

int64_t max_weight_offset(int32_t weight_zero_point) {
  return std::max(std::llabs(-128 - int64_t{weight_zero_point}),
                  std::llabs(127 - int64_t{weight_zero_point}));
}

bool fast_requantize_multiplier_ok(double multiplier) {
  const double magnitude = std::fabs(multiplier);
  return multiplier == 0.0 ||
         (std::isfinite(multiplier) && magnitude >= 0x1p-100 && magnitude <= 0x1p64);
}

void requantize_row_exact(const RequantizeRowTerms& terms, const RequantizeOutput& output,
                          void* out) {
  if (output.is_unsigned) {
    exact_row(terms, lowest(output), highest(output), output.zero_point,
              static_cast<uint8_t*>(out));
  } else {
    exact_row(terms, lowest(output), highest(output), output.zero_point, static_cast<int8_t*>(out));
  }
}

int64_t requantize_row_fast(const RequantizeRowTerms& terms, const RequantizeOutput& output,
                            void* out) {
  // The float bounds are integers of magnitude <= 383: exact in float, and the exact fallback
  // takes the same ones in double.
  const auto lo = static_cast<float>(lowest(output));
  const auto hi = static_cast<float>(highest(output));
  if (output.is_unsigned) {
    return fast_row(terms, lo, hi, output.zero_point, static_cast<uint8_t*>(out));
  }
  return fast_row(terms, lo, hi, output.zero_point, static_cast<int8_t*>(out));
}

NPUFLOW_CLONED void scale_row(const RequantizeRowTerms& t, float* __restrict out) {
  for (int64_t c = 0; c < t.cols; ++c) out[c] = static_cast<float>(exact_product(t, c));
}

}  // namespace npuflow
