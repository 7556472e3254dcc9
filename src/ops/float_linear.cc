#include "ops/float_linear.h"

#include <algorithm>
#include <vector>

namespace npuflow {

Result<std::unique_ptr<PackedWeight>> pack_linear_weight(Device& device, const float* rows,
                                                         int64_t k, int64_t n) {
  // The device takes a row-major K x N weight; transpose once here, in cache-friendly tiles.
  std::vector<float> kn(static_cast<size_t>(k * n));
  constexpr int64_t kTile = 64;
  for (int64_t n0 = 0; n0 < n; n0 += kTile) {
    for (int64_t k0 = 0; k0 < k; k0 += kTile) {
      const int64_t n1 = std::min(n, n0 + kTile);
      const int64_t k1 = std::min(k, k0 + kTile);
      for (int64_t r = n0; r < n1; ++r) {
        for (int64_t c = k0; c < k1; ++c) kn[c * n + r] = rows[r * k + c];
      }
    }
  }
  return device.pack_float_weight(kn.data(), k, n);
}

Status run_linear(Device& device, const float* x, int64_t m, const PackedWeight& weight, float* y,
                  const ExecContext& context) {
  // The device gets no lent pool: with one, the host device runs the same oneDNN fp32 matmul
  // primitive concurrently on several threads when M > 128 (one task per row panel and column
  // block), and oneDNN 2.6's shared scratchpad then corrupts results (measured: NMSE up to 1e+17
  // against the CPU backend at M=512/2048). Without a pool each primitive runs on oneDNN's own
  // OpenMP team, which is safe. `context` is kept in the signature for devices that can use it.
  (void)context;
  return device.gemm_float(x, m, weight, y, ExecContext{});
}

void reference_linear(const float* x, int64_t m, int64_t k, int64_t n,
                      const std::function<void(int64_t row, float* out)>& weight_row, float* y,
                      const ExecContext& context) {
  constexpr int64_t kRowsPerTask = 16;
  const int64_t tasks = (n + kRowsPerTask - 1) / kRowsPerTask;
  context.run(static_cast<size_t>(tasks), [&](size_t task) {
    std::vector<float> w(static_cast<size_t>(k));
    const int64_t first = static_cast<int64_t>(task) * kRowsPerTask;
    for (int64_t col = first; col < std::min(n, first + kRowsPerTask); ++col) {
      weight_row(col, w.data());
      for (int64_t row = 0; row < m; ++row) {
        const float* xr = x + row * k;
        float sum = 0.0f;
        for (int64_t i = 0; i < k; ++i) sum += xr[i] * w[i];
        y[row * n + col] = sum;
      }
    }
  });
}

}  // namespace npuflow
