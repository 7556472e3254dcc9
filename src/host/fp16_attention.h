// The host's fp16 attention (Device::attention_fp16): the exact reference every device's attention
// is held to. Operands are widened exactly; scores, softmax and P V are fp32; the output is
// rounded to fp16 once.
#pragma once

#include "core/parallel.h"
#include "device/device.h"

namespace npuflow {

// Runs one call (already checked by check_attention_call) head by head on the context's pool.
void fp16_attention_reference(const Fp16Attention& call, const ExecContext& context);

}  // namespace npuflow
