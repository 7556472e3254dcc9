#include "ops/device_attention.h"

#include <cmath>
#include <vector>

#include "core/fp16.h"
#include "core/scratch.h"

namespace npuflow {
namespace {

bool fits_half(float value, uint16_t* half) {
  *half = float_to_half_bits(value);
  return std::isfinite(value) && (*half & 0x7fffu) != 0x7c00u;
}

// rows x (heads x hd) fp32 values at `stride` apart -> fp16 [heads][rows][hd], times `scale`;
// with `transposed`, [heads][hd][rows] (the library's V layout). False if one is beyond fp16.
bool to_head_major(const float* src, int64_t stride, int64_t rows, int64_t heads, int64_t hd,
                   float scale, bool transposed, uint16_t* dst) {
  bool in_range = true;
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t c = 0; c < hd; ++c) {
        const int64_t at = transposed ? (h * hd + c) * rows + row : (h * rows + row) * hd + c;
        in_range &= fits_half(src[row * stride + h * hd + c] * scale, &dst[at]);
      }
    }
  }
  return in_range;
}

// fp16 [heads][rows][hd] -> fp32 rows of heads x hd.
void from_head_major(const uint16_t* src, int64_t rows, int64_t heads, int64_t hd, float* dst) {
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t c = 0; c < hd; ++c)
        dst[row * heads * hd + h * hd + c] = half_bits_to_float(src[(h * rows + row) * hd + c]);
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
  thread_local std::vector<uint16_t> q_buffer, k_buffer, v_buffer, mask_buffer, out_buffer,
      rows_buffer, cols_buffer;
  const auto operand_count = static_cast<size_t>(t * d);
  uint16_t* q = sized(q_buffer, operand_count);
  uint16_t* k = sized(k_buffer, operand_count);
  uint16_t* v = sized(v_buffer, operand_count);
  uint16_t* out = sized(out_buffer, operand_count);
  const bool in_range = to_head_major(qkv, 3 * d, t, heads, hd, scale, false, q) &&
                        to_head_major(qkv + d, 3 * d, t, heads, hd, 1.0f, false, k) &&
                        to_head_major(qkv + 2 * d, 3 * d, t, heads, hd, 1.0f, true, v);
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
  // A relative bias's factors, per head, in fp16 ([heads][t][grid_h], [heads][t][grid_w]).
  const RelativeAttentionBias& rel = bias.relative;
  uint16_t* rows = nullptr;
  uint16_t* cols = nullptr;
  if (rel.present()) {
    const auto row_count = static_cast<size_t>(heads * t * rel.grid_h);
    const auto col_count = static_cast<size_t>(heads * t * rel.grid_w);
    rows = sized(rows_buffer, row_count);
    cols = sized(cols_buffer, col_count);
    bool finite = true;
    for (size_t i = 0; i < row_count; ++i) finite &= fits_half(rel.rows[i], &rows[i]);
    for (size_t i = 0; i < col_count; ++i) finite &= fits_half(rel.cols[i], &cols[i]);
    if (!finite) return unsupported("a relative attention bias term is not finite in fp16");
  }
  *expressible = true;
  // Heads are contiguous blocks of q, k, v ([heads][t][hd], v [heads][hd][t]), of out and of the
  // relative bias's factors.
  const int64_t call_heads = heads / masks;
  for (int64_t h = 0; h < masks; ++h) {
    const int64_t block = h * t * hd;
    Fp16RelativeBias relative;
    if (rows != nullptr) {
      relative = {rel.grid_h, rel.grid_w, rows + h * call_heads * t * rel.grid_h,
                  cols + h * call_heads * t * rel.grid_w};
    }
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
                             .out = out + block,
                             .relative = relative};
    NPUFLOW_RETURN_IF_ERROR(device.attention_fp16(call, context));
  }
  from_head_major(out, t, heads, hd, ctx);
  return Status::ok();
}

Status device_cross_attention(Device& device, const CrossAttentionOperands& operands, float scale,
                              float* ctx, const ExecContext& context) {
  const int64_t tq = operands.queries, tk = operands.keys, heads = operands.heads;
  const int64_t hd = operands.head_dim, d = heads * hd;
  thread_local std::vector<uint16_t> q_buffer, k_buffer, v_buffer, out_buffer;
  uint16_t* q = sized(q_buffer, static_cast<size_t>(tq * d));
  uint16_t* k = sized(k_buffer, static_cast<size_t>(tk * d));
  uint16_t* v = sized(v_buffer, static_cast<size_t>(tk * d));
  uint16_t* out = sized(out_buffer, static_cast<size_t>(tq * d));
  const bool in_range =
      to_head_major(operands.q, operands.q_stride, tq, heads, hd, scale, false, q) &&
      to_head_major(operands.k, operands.kv_stride, tk, heads, hd, 1.0f, false, k) &&
      to_head_major(operands.v, operands.kv_stride, tk, heads, hd, 1.0f, true, v);
  if (!in_range) return unsupported("a q, k or v value is beyond fp16's range");
  const Fp16Attention call{.tokens = tq,
                           .kv = tk,
                           .head_dim = hd,
                           .dv = hd,
                           .heads = heads,
                           .kv_heads = heads,
                           .scale = 1.0f,  // folded into q
                           .q = q,
                           .k = k,
                           .v = v,
                           .mask = nullptr,
                           .out = out};
  NPUFLOW_RETURN_IF_ERROR(device.attention_fp16(call, context));
  from_head_major(out, tq, heads, hd, ctx);
  return Status::ok();
}

}  // namespace npuflow
