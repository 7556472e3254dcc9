#include "ops/device_attention.h"

#include <cmath>
#include <vector>

#include "core/fp16.h"
#include "core/scratch.h"

namespace npuflow {
namespace {

constexpr uint16_t kHalfMinusInfinity = 0xfc00;

bool fits_half(float value, uint16_t* half) {
  *half = float_to_half_bits(value);
  return std::isfinite(value) && (*half & 0x7fffu) != 0x7c00u;
}

}  // namespace

Status device_attention(Device& device, const float* qkv, const AttentionShape& shape, float scale,
                        const AttentionBias& bias, float* ctx, const ExecContext& context,
                        bool* expressible) {
  *expressible = false;
  const int64_t t = shape.tokens, d = shape.hidden, heads = shape.heads, hd = d / heads;
  // The library takes one mask for all of a call's heads: a bias that differs per head runs as
  // one call per head, each with its own mask.
  const bool per_head = bias.data != nullptr && bias.head_stride != 0 && heads > 1;
  const int64_t masks = per_head ? heads : 1;
  thread_local std::vector<uint16_t> q_buffer, k_buffer, v_buffer, mask_buffer, out_buffer;
  const auto operand_count = static_cast<size_t>(t * d);
  uint16_t* q = sized(q_buffer, operand_count);
  uint16_t* k = sized(k_buffer, operand_count);
  uint16_t* v = sized(v_buffer, operand_count);
  uint16_t* out = sized(out_buffer, operand_count);
  bool in_range = true;
  for (int64_t row = 0; row < t; ++row) {
    const float* src = qkv + row * 3 * d;
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t c = 0; c < hd; ++c) {
        const int64_t at = h * hd + c;
        in_range &= fits_half(src[at] * scale, &q[(h * t + row) * hd + c]);
        in_range &= fits_half(src[d + at], &k[(h * t + row) * hd + c]);
        in_range &= fits_half(src[2 * d + at], &v[(h * hd + c) * t + row]);
      }
    }
  }
  if (!in_range) return unsupported("a q, k or v value is beyond fp16's range");
  uint16_t* mask = nullptr;
  if (bias.data != nullptr) {
    mask = sized(mask_buffer, static_cast<size_t>(masks * t * t));
    for (int64_t h = 0; h < masks; ++h) {
      const float* head_bias = bias.data + h * bias.head_stride;
      for (int64_t i = 0; i < t; ++i) {
        bool any_key = false;
        for (int64_t j = 0; j < t; ++j) {
          const float value = head_bias[i * bias.row_stride + j * bias.col_stride];
          if (std::isnan(value)) return unsupported("the attention bias has a NaN");
          const uint16_t half = float_to_half_bits(value);
          mask[(h * t + i) * t + j] = half;
          any_key |= half != kHalfMinusInfinity;
        }
        if (!any_key) return unsupported("a query row has every key masked");
      }
    }
  }
  *expressible = true;
  // Heads are contiguous blocks of q, k, v ([heads][t][hd], v [heads][hd][t]) and of out.
  const int64_t call_heads = heads / masks;
  for (int64_t h = 0; h < masks; ++h) {
    const int64_t block = h * t * hd;
    const Fp16Attention call{.tokens = t,
                             .kv = t,
                             .head_dim = hd,
                             .dv = hd,
                             .heads = call_heads,
                             .kv_heads = call_heads,
                             .scale = 1.0f,  // folded into q
                             .q = q + block,
                             .k = k + block,
                             .v = v + block,
                             .mask = mask ? mask + h * t * t : nullptr,
                             .out = out + block};
    NPUFLOW_RETURN_IF_ERROR(device.attention_fp16(call, context));
  }
  for (int64_t row = 0; row < t; ++row) {
    float* dst = ctx + row * d;
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t c = 0; c < hd; ++c)
        dst[h * hd + c] = half_bits_to_float(out[(h * t + row) * hd + c]);
    }
  }
  return Status::ok();
}

}  // namespace npuflow
