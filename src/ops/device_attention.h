// An encoder's self-attention on the device (Device::attention_fp16): one sequence's fp32
// [q | k | v] rows laid out head-major in fp16, q multiplied by the scale first (so the unscaled
// products of large activations cannot overflow fp16), the bias given as the fp16 mask (one call
// for all heads when they share it; one call per head, each with its own mask, when it differs
// per head), and the fp16 output widened into ctx.
#pragma once

#include "core/parallel.h"
#include "core/status.h"
#include "device/device.h"
#include "ops/host_attention.h"

namespace npuflow {

// When the call cannot be expressed faithfully it returns kUnsupported without calling the device
// and sets *expressible to false: a query row whose every key is masked in fp16 (the host decides
// what such a row gives: NaN, zeros or a uniform average), or an operand beyond fp16's range.
// Otherwise *expressible is true and the status is the device's. On any error the caller runs
// host_attention.
Status device_attention(Device& device, const float* qkv, const AttentionShape& shape, float scale,
                        const AttentionBias& bias, float* ctx, const ExecContext& context,
                        bool* expressible);

// Attention of `queries` rows over `keys` other rows (a DiT's cross-attention on its text
// context), no mask: softmax(scale q k^T) v per head, fp16 on the device, widened into ctx
// (queries x heads * head_dim). kUnsupported when an operand is beyond fp16's range; the caller
// then runs its host attention.
struct CrossAttentionOperands {
  const float* q = nullptr;  // queries rows, q_stride apart
  int64_t q_stride = 0;
  const float* k = nullptr;  // keys rows each, kv_stride apart
  const float* v = nullptr;
  int64_t kv_stride = 0;
  int64_t queries = 0, keys = 0, heads = 0, head_dim = 0;
};
Status device_cross_attention(Device& device, const CrossAttentionOperands& operands, float scale,
                              float* ctx, const ExecContext& context);

}  // namespace npuflow
