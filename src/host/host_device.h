// The host device: the device primitive set on the CPU, exact for integers. GEMMs run through
// oneDNN (AMX / AVX-512 VNNI / AVX2 kernels chosen at run time) on weights reordered once into
// the layout oneDNN's kernel prefers. Weights are packed in column blocks; with a thread pool
// lent by the caller, each block is one single-threaded task on that pool.
#pragma once

#include <memory>
#include <string>

#include "device/device.h"

namespace npuflow {

class HostDevice final : public Device {
 public:
  explicit HostDevice(const DeviceOptions& options);
  ~HostDevice() override;

  std::string_view name() const override { return "host"; }
  std::string description() const override;

  Result<std::unique_ptr<PackedWeight>> pack_int8_weight(const int8_t* weight, int64_t k,
                                                         int64_t n) override;
  Status gemm_int8(const void* a, ElementType a_type, int64_t m, const PackedWeight& w, int32_t* c,
                   const ExecContext& context) override;
  Status gemm_int8_blocks(const void* a, ElementType a_type, int64_t m, const PackedWeight& w,
                          const Int32BlockSink& sink, const ExecContext& context) override;
  Result<std::unique_ptr<PackedWeight>> pack_float_weight(const float* weight, int64_t k,
                                                          int64_t n) override;
  Status gemm_float(const float* a, int64_t m, const PackedWeight& w, float* c,
                    const ExecContext& context) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace npuflow
