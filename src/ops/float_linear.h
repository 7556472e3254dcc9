// A float linear layer y = x * W^T on a device, with W resident. This is the one place where the
// float path reaches a device's primitives: the fp32 pair pack_float_weight / gemm_float where the
// device has it (host), else the fp16 pair with fp32 results (sim, an NPU).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "device/device.h"

namespace npuflow {

// Packs W given as N rows of K floats (the layout of a ggml / PyTorch linear weight).
Result<std::unique_ptr<PackedWeight>> pack_linear_weight(Device& device, const float* rows,
                                                         int64_t k, int64_t n);

// y[m][n] = sum_k x[m][k] * W[n][k]; x is M x K and y M x N, both row-major. On an fp16 device
// a finite activation beyond fp16's range, or a result that overflows from finite operands, is
// refused (kUnsupported) for the host reference to compute: the device never turns finite values
// into infinities. pack_linear_weight refuses a finite weight beyond that range the same way.
Status run_linear(Device& device, const float* x, int64_t m, const PackedWeight& weight, float* y,
                  const ExecContext& context);

// The host reference for the same product, used when a device refuses or fails a call (a claim
// never fails a run). weight_row(n, out) writes row n of W (K floats) into out.
void reference_linear(const float* x, int64_t m, int64_t k, int64_t n,
                      const std::function<void(int64_t row, float* out)>& weight_row, float* y,
                      const ExecContext& context);

}  // namespace npuflow
