// Multi-head self-attention on the host, in fp32: softmax(scale * Q K^T + bias) V per head, the
// encoder plan's attention (and the place a device attention plugs in).
#pragma once

#include <cstdint>

#include "core/parallel.h"

namespace npuflow {

// An additive bias broadcast over [heads, T, T]: the score of head h, query i, key j gets
// data[h * head_stride + i * row_stride + j * col_stride] (a stride is 0 where the bias has a
// dimension of 1). data == nullptr: no bias.
// Optionally also a decomposed relative-position bias (SAM's ViT-Det, Device's Fp16RelativeBias in
// fp32): the keys form a grid_h x grid_w grid (grid_h * grid_w = T), and the score of head h,
// query i, key j gets rows[(h * T + i) * grid_h + j / grid_w] + cols[(h * T + i) * grid_w +
// j % grid_w], after the dense term: ((scale q.k + data) + row) + col, SAM's order. Added per
// query row, never laid out as T x T.
struct RelativeAttentionBias {
  const float* rows = nullptr;
  const float* cols = nullptr;
  int64_t grid_h = 0, grid_w = 0;
  bool present() const { return rows != nullptr; }
};

struct AttentionBias {
  const float* data = nullptr;
  int64_t head_stride = 0, row_stride = 0, col_stride = 0;
  RelativeAttentionBias relative;
};

struct AttentionShape {
  int64_t tokens = 0;
  int64_t hidden = 0;  // D: q, k and v each D wide, heads x head_dim
  int64_t heads = 0;
};

// qkv: T rows of [q | k | v] (3D wide); ctx: T rows of D, written. With nan_to_zero, NaN
// probabilities (a fully masked row) count as 0, as SDPA exports' Where(IsNaN(P), 0, P) makes
// them. Tiled by (head, block of queries) on the context's pool; each block's scores stay in cache
// through QK^T, the row softmax and PV; AVX2 kernels where the CPU has them (ops/simd.h).
void host_attention(const float* qkv, const AttentionShape& shape, float scale,
                    const AttentionBias& bias, bool nan_to_zero, float* ctx,
                    const ExecContext& context);

// The same attention in double precision, one query at a time: the oracle the tests hold the
// tiled kernels to (slow; never on a run path).
void host_attention_reference(const float* qkv, const AttentionShape& shape, float scale,
                              const AttentionBias& bias, bool nan_to_zero, float* ctx);

}  // namespace npuflow
