// One fused A8W8 QDQ MatMul group, ready to run: the weight packed once on the device (resident),
// a plain copy for the host integer loop, and the exact epilogue. Calls route by row count:
// fewer than min_rows rows run the host loop, the rest the device; a device refusal falls back
// to the host loop with the same exact result. Rows are zero-padded to the device's
// row_multiple() (RK3588: 4) rather than refused. A weight the device cannot pack (outside its
// contract, IOVA budget spent, any refusal) makes every call of the group run on the host loop.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/log.h"
#include "device/device.h"
#include "ops/device_fallback.h"
#include "quant/qdq_epilogue.h"

namespace npuflow {

struct QdqMatMulCounters {
  std::atomic<int64_t> device_calls{0};
  std::atomic<int64_t> host_row_calls{0};
  std::atomic<int64_t> fallback_calls{0};
  std::atomic<int64_t> padded_calls{0};  // device calls whose rows were padded
};

class QdqMatMul {
 public:
  // weight: row-major K x N in its graph type (int8, or uint8 which is shifted to int8 here).
  static Result<std::unique_ptr<QdqMatMul>> create(std::string name, QdqGemmSpec spec,
                                                   const void* weight, ElementType weight_type,
                                                   std::shared_ptr<Device> device, int64_t min_rows,
                                                   Logger logger);

  // a: M x K int8/uint8 activations (already quantized). out: M x N int8/uint8 or float.
  // `rows`: the per-row activation scales and zero points when the spec has x_per_row.
  Status run(const void* a, ElementType a_type, int64_t m, void* out, const ExecContext& context,
             const RowQuantization* rows = nullptr) const;

  // a: M x K float activations that a shared DequantizeLinear produced from int8/uint8 values
  // with this group's x scale and zero point. Quantizing them again with the same parameters
  // recovers the original integers exactly, because |a/s - q + zp| stays far below 0.5.
  Status run_from_dequantized(const float* a, ElementType quantized_type, int64_t m, void* out,
                              const ExecContext& context,
                              const RowQuantization* rows = nullptr) const;

  const QdqGemmSpec& spec() const { return epilogue_.spec(); }
  const QdqMatMulCounters& counters() const { return counters_; }
  size_t resident_bytes() const { return packed_ ? packed_->resident_bytes() : 0; }
  bool on_device() const { return packed_ != nullptr; }

 private:
  QdqMatMul(std::string name, QdqEpilogue epilogue, std::vector<int8_t> weight,
            std::unique_ptr<PackedWeight> packed, std::shared_ptr<Device> device, int64_t min_rows,
            Logger logger);

  std::string name_;
  QdqEpilogue epilogue_;
  std::vector<int8_t> weight_;            // plain K x N copy for the host loop
  std::unique_ptr<PackedWeight> packed_;  // null: the device could not pack it
  std::shared_ptr<Device> device_;
  int64_t min_rows_;
  Logger logger_;
  mutable QdqMatMulCounters counters_;
  DeviceFallback fallback_;
};

}  // namespace npuflow
