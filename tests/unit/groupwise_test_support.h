// What the group-wise tests share: Device::gemm_groupwise's arithmetic as specified.
#pragma once

#include <cstdint>
#include <vector>

namespace npuflow {

// c[m][n] = sum_g (as[m][g] * ws[n][g]) * float(exact partial), g ascending: Device::gemm_groupwise
// as specified, written out plainly.
inline std::vector<float> specified_groupwise(const std::vector<int8_t>& a,
                                              const std::vector<float>& as,
                                              const std::vector<int8_t>& w_kn,
                                              const std::vector<float>& ws, int64_t m, int64_t k,
                                              int64_t n, int64_t group) {
  const int64_t groups = k / group;
  std::vector<float> c(m * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float sum = 0.0f;
      for (int64_t g = 0; g < groups; ++g) {
        int32_t partial = 0;
        for (int64_t kk = g * group; kk < (g + 1) * group; ++kk) {
          partial += int32_t{a[i * k + kk]} * w_kn[kk * n + j];
        }
        const float scale = as[i * groups + g] * ws[j * groups + g];
        const float term = scale * static_cast<float>(partial);
        sum = sum + term;
      }
      c[i * n + j] = sum;
    }
  }
  return c;
}

}  // namespace npuflow
