// The plain host integer loop: exact int8/uint8 x int8 -> int32 GEMM over a row-major K x N
// weight. Used for calls too small to be worth a device launch (routing by rows) and as the
// fallback when a device refuses a call.
#pragma once

#include <cstdint>

#include "core/element_type.h"

namespace npuflow {

void int8_gemm_loop(const void* a, ElementType a_type, int64_t m, int64_t k, const int8_t* w,
                    int64_t n, int32_t* c);

}  // namespace npuflow
