// Routing rules for a fused attention offered by a runtime (the ggml front end's FLASH_ATTN_EXT),
// runtime-neutral like route/matmul_route.h: the front end describes the candidate in these terms
// and asks. The rules are Device::attention_fp16's operands (fp32 queries rounded to fp16, fp16
// keys and values, one fp16 mask shared by the heads, a soft-cap), librocketnpu's flash-attention
// contract on head sizes (shared by every device, as the matmul contract is), and the two
// thresholds below which the CPU wins: keys (n_kv) and query rows (decode stays on the CPU).
#pragma once

#include <cstdint>
#include <string>

#include "route/attention_route.h"
#include "route/matmul_route.h"

namespace npuflow {

struct FlashAttentionCandidate {
  bool queries_f32 = false;
  bool keys_values_f16 = false;
  bool mask_f16 = true;          // no mask, or an fp16 one
  bool mask_per_head = false;    // a mask that differs per head (the device takes one per call)
  bool mask_covers = true;       // the mask has a row per query and a column per key
  bool rows_contiguous = false;  // each head's q, k and v rows are dense along the head dim
  bool output_f32 = false;
  bool alibi = false;         // max_bias > 0
  bool sinks = false;         // attention sinks (gpt-oss)
  bool softcap_valid = true;  // the soft-cap is 0 or a finite positive value
  int64_t head_dim = 0, dv = 0, tokens = 0, kv = 0, heads = 0, kv_heads = 0, sequences = 0;
};

struct FlashAttentionRouting {
  int64_t min_kv = 1024;     // the fa_min_kv knob
  int64_t min_tokens = 128;  // the min_m knob: query rows, as a MUL_MAT's activation rows
};

// librocketnpu's flash attention contract on the value head size (the key head size is
// kAttentionHeadDimMultiple's).
inline constexpr int64_t kAttentionValueDimMultiple = 16;

RouteVerdict route_flash_attention(const FlashAttentionCandidate& candidate,
                                   const FlashAttentionRouting& routing);

std::string describe(const FlashAttentionCandidate& candidate);

}  // namespace npuflow
