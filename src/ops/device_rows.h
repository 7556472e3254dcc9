// The device's row contract for activations (Device::row_multiple; RK3588: M % 4): zero rows are
// appended to reach it and their results dropped by the caller.
#pragma once

#include <cstdint>
#include <vector>

#include "device/device.h"

namespace npuflow {

struct DeviceRows {
  const void* data = nullptr;  // a itself, or `scratch` holding a and its zero rows
  int64_t rows = 0;            // m rounded up to the device's multiple
  bool padded = false;         // zero rows were appended
};

// a: m rows of row_bytes each; `type` the operand type the device's multiple is asked for.
DeviceRows pad_to_device_rows(const Device& device, ElementType type, const void* a, int64_t m,
                              size_t row_bytes, std::vector<uint8_t>& scratch);

// gemm_int8_blocks on the padded rows, handing `sink` the part of each block that lies in the first
// m (real) rows only.
Status gemm_int8_real_rows(Device& device, const DeviceRows& a, ElementType a_type, int64_t m,
                           const PackedWeight& w, const Int32BlockSink& sink,
                           const ExecContext& context);

}  // namespace npuflow
