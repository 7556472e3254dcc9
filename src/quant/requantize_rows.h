// The row kernels of the QDQ epilogue: one row of int32 accumulators to int8/uint8 (or float).
//
// The exact kernel forms acc' = acc + bias - zp_w * row_sum and acc' * multiplier in double,
// where every term is an integer below 2^53, so the only rounding is the final one.
//
// The fast kernel gives the same integers at float32 width. acc' is formed in wrapping 32-bit
// integers, exact whenever the true |acc'| < 2^31 (the caller proves that from K and the zero
// points), then f = float(acc') * float(multiplier) is within 3 * 2^-24 * |f| of the double
// product. round(f) = round(double product) whenever f is farther than that from a half-integer.
// The rare values that are not (about 1 in 10^5 at typical scales) are redone by the exact kernel,
// so the output is bit-identical to the exact kernel's.
#pragma once

#include <cstdint>

namespace npuflow {

// Whether sum_k (a - zp_x)(w - zp_w) surely fits in int32: K * max|a - zp_x| * max|w - zp_w|
// < 2^31, with a and w anywhere in [-128, 255].
bool accumulators_fit_int32(int64_t k, int64_t activation_zero_point, int64_t max_weight_offset);

// max|w - zp_w| over int8 weights w for one (shifted) weight zero point.
int64_t max_weight_offset(int32_t weight_zero_point);

// One row's terms. The double arrays drive the exact kernel; the 32-bit ones, the fast kernel.
struct RequantizeRowTerms {
  const int32_t* acc = nullptr;
  int64_t cols = 0;
  // Exact: acc' = acc + column_bias - zp_w * row_sum, all integers held in double.
  const double* column_bias = nullptr;
  const double* zp_w = nullptr;
  double row_sum = 0.0;
  const double* multiplier = nullptr;
  // Fast: the same integers modulo 2^32, and the multipliers rounded to float.
  const uint32_t* column_bias_bits = nullptr;
  const uint32_t* zp_w_bits = nullptr;
  uint32_t row_sum_bits = 0;
  const float* multiplier_float = nullptr;
};

struct RequantizeOutput {
  int32_t zero_point = 0;
  bool is_unsigned = false;  // uint8 when true, int8 otherwise
};

// Whether a multiplier keeps the fast kernel's error bound: zero, or a normal float well inside
// float's range (so float(m) has a relative error of at most 2^-24 and no product overflows to
// anything but a saturated value).
bool fast_requantize_multiplier_ok(double multiplier);

// The exact kernel: out[c] = saturate(round_half_even(acc'[c] * multiplier[c]) + zero_point).
void requantize_row_exact(const RequantizeRowTerms& terms, const RequantizeOutput& output,
                          void* out);

// The fast kernel, bit-identical to requantize_row_exact. Needs the 32-bit terms, accumulators
// that fit (accumulators_fit_int32) and every multiplier passing fast_requantize_multiplier_ok.
// Returns how many values took the exact path (near a rounding tie).
int64_t requantize_row_fast(const RequantizeRowTerms& terms, const RequantizeOutput& output,
                            void* out);

// Float output: out[c] = float(acc'[c] * multiplier[c]), exact terms only.
void scale_row(const RequantizeRowTerms& terms, float* out);

}  // namespace npuflow
