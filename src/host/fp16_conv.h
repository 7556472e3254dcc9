// The host's fp16 convolutions (Device::conv2d_fp16, Device::conv_transpose2d_fp16): the exact
// references every device's convolution is held to, as librocketnpu's own oracles define them
// (rocket_conv2d_ref_fp16, rocket_conv_transpose2d_ref_fp16: "fp32 accumulate, fp16 store").
// Operands are widened exactly; each output element is summed in fp32 from 0, in ascending
// input channel, kernel row, kernel column, zero padding contributing nothing; the sum is rounded
// to fp16 once. The transposed convolution follows its scatter definition directly (the output
// pixels each input pixel reaches), independent of any lowering onto a forward convolution.
#pragma once

#include "core/parallel.h"
#include "device/device.h"

namespace npuflow {

// Run one call (already checked by check_conv2d_call / check_conv_transpose2d_call) output
// channel by output channel on the context's pool.
void fp16_conv2d_reference(const Fp16Conv2d& call, const ExecContext& context);
void fp16_conv_transpose2d_reference(const Fp16ConvTranspose2d& call, const ExecContext& context);

}  // namespace npuflow
