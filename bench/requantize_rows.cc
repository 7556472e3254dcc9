// The QDQ epilogue's row kernels in isolation: the exact (double) kernel against the fast
// (float32, exact near ties) one on one 512 x 3072 output, the largest projection of the demo
// layer at M = 512. Single thread; prints the median of 15 passes of each, alternating.
//
//   build/bin/npuflow_bench_requantize
#include "quant/requantize_rows.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "median.h"

namespace {

constexpr int64_t kRows = 512;
constexpr int64_t kCols = 3072;

}  // namespace

int main() {
  using namespace npuflow;
  using bench::median;
  std::mt19937 rng(1);
  // Accumulators and scales of a typical layer: |acc'| up to ~2e5, outputs spread over int8.
  std::uniform_int_distribution<int32_t> acc_values(-200000, 200000);
  std::vector<int32_t> acc(static_cast<size_t>(kRows * kCols));
  for (int32_t& value : acc) value = acc_values(rng);
  std::vector<double> bias(kCols), zp_w(kCols, 0.0), multiplier(kCols);
  std::vector<uint32_t> bias_bits(kCols), zp_w_bits(kCols, 0);
  std::vector<float> multiplier_float(kCols);
  for (int64_t c = 0; c < kCols; ++c) {
    bias[c] = static_cast<double>(c * 7 - 5000);
    bias_bits[c] = static_cast<uint32_t>(c * 7 - 5000);
    multiplier[c] = 3.1e-4 + static_cast<double>(c) * 1e-8;
    multiplier_float[c] = static_cast<float>(multiplier[c]);
  }
  std::vector<int8_t> out(acc.size());
  const RequantizeOutput output{3, false};
  std::vector<double> exact_ms, fast_ms;
  int64_t redone = 0;
  for (int pass = 0; pass < 15; ++pass) {
    for (const bool fast : {false, true}) {
      const auto start = std::chrono::steady_clock::now();
      for (int64_t r = 0; r < kRows; ++r) {
        RequantizeRowTerms terms;
        terms.acc = acc.data() + r * kCols;
        terms.cols = kCols;
        terms.column_bias = bias.data();
        terms.zp_w = zp_w.data();
        terms.row_sum = 1234.0;
        terms.multiplier = multiplier.data();
        terms.column_bias_bits = bias_bits.data();
        terms.zp_w_bits = zp_w_bits.data();
        terms.row_sum_bits = 1234;
        terms.multiplier_float = multiplier_float.data();
        if (fast) {
          redone += requantize_row_fast(terms, output, out.data() + r * kCols);
        } else {
          requantize_row_exact(terms, output, out.data() + r * kCols);
        }
      }
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      (fast ? fast_ms : exact_ms).push_back(ms);
    }
  }
  const double exact = median(exact_ms), fast = median(fast_ms);
  std::printf(
      "requantize %lldx%lld int8, one thread: exact %.3f ms, fast %.3f ms (%.2fx); "
      "%.2e of the values redone in double\n",
      static_cast<long long>(kRows), static_cast<long long>(kCols), exact, fast, exact / fast,
      static_cast<double>(redone) / (15.0 * kRows * kCols));
  return 0;
}
