// A linear weight as runtimes store it (N rows of K values, the ggml / PyTorch layout) turned into
// the row-major K x N matrix every Device::pack_* takes, once per weight.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace npuflow {

// rows: N x K; returns K x N. Transposed in 64 x 64 tiles so both sides stay in cache.
template <typename T>
std::vector<T> rows_to_k_by_n(const T* rows, int64_t k, int64_t n) {
  std::vector<T> kn(static_cast<size_t>(k * n));
  constexpr int64_t kTile = 64;
  for (int64_t n0 = 0; n0 < n; n0 += kTile) {
    for (int64_t k0 = 0; k0 < k; k0 += kTile) {
      const int64_t n1 = std::min(n, n0 + kTile), k1 = std::min(k, k0 + kTile);
      for (int64_t r = n0; r < n1; ++r) {
        for (int64_t c = k0; c < k1; ++c) kn[c * n + r] = rows[r * k + c];
      }
    }
  }
  return kn;
}

}  // namespace npuflow
