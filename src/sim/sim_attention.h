// librocketnpu's flash attention arithmetic (rocket_flash_attn_fp16*, RU src/rocket_attn.c;
// shared/reference/rk3588-npu.md §2 "Composed ops"), per query head:
//   S = Q K^T on the NPU: fp16 operands, each K tile rounded to fp16 and summed on the host in
//       fp32 (the chained mm_batch path accumulates on the host), S rounded to fp16;
//   host softmax in fp32 over scale * S (soft-capped where the call has a cap) + mask: exp(s - max)
//   stored as fp16, scaled by 1 / sum
//       and stored as fp16 again (two roundings), a row of -inf scores giving zeros;
//   out = P V on the NPU with the same accumulation, rounded to fp16.
// Padding rows to %4 and keys to %32 (pad keys score -inf) changes nothing, so none is done.
#pragma once

#include "core/parallel.h"
#include "core/status.h"
#include "device/device.h"

namespace npuflow::sim {

// The library's shape rules: head_dim % 32 (the Q K^T contraction), dv % 16 (the P V output).
// ROCKET_E_SHAPE as kUnsupported otherwise.
Status check_attention_shape(const Fp16Attention& call);

// Computes `call` (already checked) head by head on the context's pool. A relative bias is added
// from its factors as each score row is formed (add_relative_bias), in fp32 after the mask: the
// per-tile bias the library does not have yet, simulated as the design asks of it.
void flash_attention(const Fp16Attention& call, const ExecContext& context);

}  // namespace npuflow::sim
