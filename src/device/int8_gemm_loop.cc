#include "device/int8_gemm_loop.h"

#include <algorithm>

namespace npuflow {
namespace {

// Row-at-a-time so the inner loop over n is contiguous and vectorizes; int32 cannot overflow
// for K below 2^17 (|a*w| <= 2^15).
template <typename A>
void gemm_rows(const A* a, int64_t m, int64_t k, const int8_t* w, int64_t n, int32_t* c) {
  for (int64_t row = 0; row < m; ++row) {
    int32_t* out = c + row * n;
    std::fill(out, out + n, 0);
    const A* a_row = a + row * k;
    for (int64_t kk = 0; kk < k; ++kk) {
      const int32_t av = a_row[kk];
      if (av == 0) continue;
      const int8_t* w_row = w + kk * n;
      for (int64_t col = 0; col < n; ++col) out[col] += av * static_cast<int32_t>(w_row[col]);
    }
  }
}

}  // namespace

void int8_gemm_loop(const void* a, ElementType a_type, int64_t m, int64_t k, const int8_t* w,
                    int64_t n, int32_t* c) {
  if (a_type == ElementType::kUInt8) {
    gemm_rows(static_cast<const uint8_t*>(a), m, k, w, n, c);
  } else {
    gemm_rows(static_cast<const int8_t*>(a), m, k, w, n, c);
  }
}

}  // namespace npuflow
