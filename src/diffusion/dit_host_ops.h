// The DiT's host kernels in fp32 (docs/diffusion.md, "Forward"): activations, RMSNorm, the
// modulated LayerNorm and gated residual of AdaLN, per-head QK-norm, 3-D RoPE, and the host
// cross-attention that an fp32 device (or a refused fp16 call) uses.
#pragma once

#include <cstdint>
#include <vector>

#include "core/parallel.h"
#include "diffusion/dit_model.h"

namespace npuflow::diffusion {

float silu(float u);
float gelu_tanh(float u);
// u / sqrt(mean(u^2) + eps) * weight, over `size` values in place.
void rms_normalize(float* u, int64_t size, const float* weight);
// h = layernorm(x) * (1 + scale) + shift per row; layernorm without affine, population variance.
void modulated_layernorm(const float* x, int64_t rows, int64_t width, const float* shift,
                         const float* scale, float* h, const ExecContext& exec);
// x += gate * f per row.
void gated_residual(float* x, const float* f, const float* gate, int64_t rows, int64_t width);
// Per-head RMSNorm of the `heads` x head_dim values at column `offset` of each row.
void normalize_heads(float* rows, int64_t count, int64_t stride, int64_t offset, int64_t heads,
                     int64_t head_dim, const float* weight, const ExecContext& exec);

// cos and sin of every token's rotation angles: [tokens][head_dim / 2] each.
struct RopeTable {
  std::vector<float> cos, sin;
};
RopeTable rope_table(const DitConfig& c, int64_t rows, int64_t cols);
// Rotates each head's pairs of the `heads` x head_dim values at column `offset` of each row.
void apply_rope(float* rows, int64_t count, int64_t stride, int64_t offset, int64_t heads,
                int64_t head_dim, const RopeTable& table);

// softmax(q k^T / sqrt(hd)) v per head: q [queries][D]; kv [keys][2D] (k | v); out [queries][D].
void cross_attention(const float* q, const float* kv, int64_t queries, int64_t keys, int64_t heads,
                     int64_t head_dim, float* out, const ExecContext& exec);

}  // namespace npuflow::diffusion
