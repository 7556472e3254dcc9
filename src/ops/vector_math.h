// The host encoder's element-wise fp32 ops, vectorized (see ops/simd.h for which kernels run):
// LayerNorm over rows, the GELU forms, the gated product and the residual add. Row loops run on
// the caller's pool.
#pragma once

#include <cstdint>

#include "core/parallel.h"

namespace npuflow {

enum class VectorActivation { kGeluErf, kGeluTanh, kQuickGelu };

// y = (x - mean) / sqrt(var + epsilon) * gamma (+ beta) per row of d; y may be x. beta may be null.
void layer_norm(const float* x, int64_t rows, int64_t d, const float* gamma, const float* beta,
                float epsilon, float* y, const ExecContext& context);

// y[i] = act(x[i]) for `rows` rows of `cols` (row strides given); y may be x.
void activate_rows(VectorActivation kind, const float* x, int64_t x_stride, float* y,
                   int64_t y_stride, int64_t rows, int64_t cols, const ExecContext& context);

// A gated MLP's product, row by row: y[r][i] = act(x[r][act_at + i]) * x[r][gate_at + i] with x
// rows of 2 * cols and y rows of cols; y may start where x does (each row is read before the
// rows after it are written).
void gated_activation(VectorActivation kind, const float* x, int64_t act_at, int64_t gate_at,
                      float* y, int64_t rows, int64_t cols);

// h[i] += branch[i] (times scale[i % d] where scale is not null) for rows x d values.
void add_residual(float* h, const float* branch, const float* scale, int64_t rows, int64_t d);

}  // namespace npuflow
