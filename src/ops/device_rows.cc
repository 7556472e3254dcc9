#include "ops/device_rows.h"

#include <algorithm>
#include <cstring>

#include "core/scratch.h"

namespace npuflow {

DeviceRows pad_to_device_rows(const Device& device, ElementType type, const void* a, int64_t m,
                              size_t row_bytes, std::vector<uint8_t>& scratch) {
  const int64_t multiple = device.row_multiple(type);
  const int64_t rows = (m + multiple - 1) / multiple * multiple;
  if (rows == m) return {a, m, false};
  uint8_t* padded = sized(scratch, static_cast<size_t>(rows) * row_bytes);
  std::memcpy(padded, a, static_cast<size_t>(m) * row_bytes);
  std::memset(padded + static_cast<size_t>(m) * row_bytes, 0,
              static_cast<size_t>(rows - m) * row_bytes);
  return {padded, rows, true};
}

Status gemm_int8_real_rows(Device& device, const DeviceRows& a, ElementType a_type, int64_t m,
                           const PackedWeight& w, const Int32BlockSink& sink,
                           const ExecContext& context) {
  if (!a.padded) return device.gemm_int8_blocks(a.data, a_type, a.rows, w, sink, context);
  const Int32BlockSink real_rows = [&](int64_t row, int64_t col, int64_t rows, int64_t cols,
                                       const int32_t* block, int64_t ld) {
    if (row < m) sink(row, col, std::min(rows, m - row), cols, block, ld);
  };
  return device.gemm_int8_blocks(a.data, a_type, a.rows, w, real_rows, context);
}

}  // namespace npuflow
