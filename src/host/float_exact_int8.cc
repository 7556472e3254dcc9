#include "host/float_exact_int8.h"

namespace npuflow {

FloatChunks float_chunks_for(int64_t k) {
  return FloatChunks{k, k <= 0 ? 0 : (k + kExactFloatChunk - 1) / kExactFloatChunk};
}

void widen_weight_rows(const int8_t* weight, int64_t n, int64_t begin, int64_t size, float* out) {
  const int8_t* rows = weight + begin * n;
  for (int64_t i = 0; i < size * n; ++i) out[i] = static_cast<float>(rows[i]);
}

void widen_activation_columns(const void* a, ElementType a_type, int64_t m, int64_t k,
                              int64_t begin, int64_t size, float* out) {
  for (int64_t row = 0; row < m; ++row) {
    float* dst = out + row * size;
    if (a_type == ElementType::kUInt8) {
      const uint8_t* src = static_cast<const uint8_t*>(a) + row * k + begin;
      for (int64_t i = 0; i < size; ++i) dst[i] = static_cast<float>(int{src[i]} - 128);
    } else {
      const int8_t* src = static_cast<const int8_t*>(a) + row * k + begin;
      for (int64_t i = 0; i < size; ++i) dst[i] = static_cast<float>(src[i]);
    }
  }
}

}  // namespace npuflow
