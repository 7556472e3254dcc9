// The host device: the device primitive set on the CPU, exact for integers. GEMMs run through
// oneDNN (AMX / AVX-512 VNNI / AVX2 kernels chosen at run time) on weights reordered once into
// the layout oneDNN's kernel prefers. Weights are packed in column blocks; with a thread pool
// lent by the caller, each block is one single-threaded task on that pool. Int8 GEMMs of few rows
// skip oneDNN for a kernel of their own on the same packed blocks (host/vnni_rows_gemm.h).
// A weight runs on the device that packed it.
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
  // The kernel an int8 GEMM of `a_type` activations on `w` runs past few rows: oneDNN's
  // implementation name ("ref..." is its slow reference loop), "float32 chunks" on CPUs without
  // exact int8 kernels.
  std::string int8_kernel(ElementType a_type, const PackedWeight& w) const;
  Status gemm_int8_blocks(const void* a, ElementType a_type, int64_t m, const PackedWeight& w,
                          const Int32BlockSink& sink, const ExecContext& context) override;
  Result<std::unique_ptr<PackedWeight>> pack_float_weight(const float* weight, int64_t k,
                                                          int64_t n) override;
  Status gemm_float(const float* a, int64_t m, const PackedWeight& w, float* c,
                    const ExecContext& context) override;

  // fp16 runs as fp32 (oneDNN) on the operands widened exactly, rounded once to fp16 if asked.
  Result<std::unique_ptr<PackedWeight>> pack_fp16_weight(const uint16_t* weight, int64_t k,
                                                         int64_t n) override;
  Status gemm_fp16(const uint16_t* a, int64_t m, const PackedWeight& w, void* c, ElementType c_type,
                   const ExecContext& context) override;
  // int4 and group-wise: plain exact integer loops (no saturation), fp32 group scaling.
  Result<std::unique_ptr<PackedWeight>> pack_int4_weight(const int8_t* weight, int64_t k,
                                                         int64_t n) override;
  Status gemm_int4(const int8_t* a, int64_t m, const PackedWeight& w, int32_t* c,
                   const ExecContext& context) override;
  Result<std::unique_ptr<PackedWeight>> pack_groupwise_weight(const int8_t* weight, int64_t k,
                                                              int64_t n, ElementType type,
                                                              int64_t group) override;
  Status gemm_groupwise(const int8_t* a, const float* a_scales, int64_t m, const PackedWeight& w,
                        const float* w_scales, float* c, const ExecContext& context) override;

  Status attention_fp16(const Fp16Attention& call, const ExecContext& context) override;
  Status conv2d_fp16(const Fp16Conv2d& call, const ExecContext& context) override;
  Status conv_transpose2d_fp16(const Fp16ConvTranspose2d& call,
                               const ExecContext& context) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace npuflow
