// The integer GEMM every device's int8 result is defined by, as a plain loop: exact int8/uint8 x
// int8 -> int32 over a row-major K x N weight. Beside the Device interface, not in a device, so
// that the kernels above (quant/) run it without reaching into the host device: for calls too
// small to be worth a device launch (routing by rows), and as the host reference that
// ops/device_fallback.h reruns a refused or failed call on, over the unpacked weight the kernel
// keeps (a second, host-packed copy would double the weight's memory).
#pragma once

#include <cstdint>

#include "core/element_type.h"

namespace npuflow {

void int8_gemm_loop(const void* a, ElementType a_type, int64_t m, int64_t k, const int8_t* w,
                    int64_t n, int32_t* c);

}  // namespace npuflow
