#include "ops/vector_math.h"

#include <algorithm>
#include <cmath>

#include "ops/avx2_math.h"
#include "ops/simd.h"

namespace npuflow {
namespace {

// Rows per pool task: enough work per task to pay its dispatch.
int64_t rows_per_task(int64_t cols) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, cols));
}

void for_row_chunks(int64_t rows, int64_t cols, const ExecContext& context,
                    const std::function<void(int64_t, int64_t)>& body) {
  const int64_t chunk = rows_per_task(cols);
  const int64_t tasks = (rows + chunk - 1) / chunk;
  context.run(static_cast<size_t>(tasks), [&](size_t t) {
    const int64_t begin = static_cast<int64_t>(t) * chunk;
    body(begin, std::min(rows, begin + chunk));
  });
}

float activate_scalar(VectorActivation kind, float x) {
  switch (kind) {
    case VectorActivation::kGeluErf:
      return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
    case VectorActivation::kGeluTanh: {
      const float inner = 0.79788456080286536f * (x + 0.044715f * x * x * x);
      return 0.5f * x * (1.0f + std::tanh(inner));
    }
    case VectorActivation::kQuickGelu:
      return x / (1.0f + std::exp(-1.702f * x));
  }
  return x;
}

// A double sum as the fp32 sum it stands for: infinite where fp32 would round it to infinity
// (0x1.ffffffp+127 is FLT_MAX plus half its ulp, the first magnitude that rounds up).
double in_fp32_range(double sum) {
  return std::abs(sum) < 0x1.ffffffp+127 ? sum : sum * INFINITY;
}

void layer_norm_row_scalar(const float* in, int64_t d, const float* gamma, const float* beta,
                           float epsilon, float* out) {
  // Accumulated in double, but the row's sum and sum of squared deviations are fp32 statistics,
  // as in ONNX's LayerNormalization and in the AVX2 kernel: beyond fp32's range they are
  // infinite, so a row whose deviations overflow comes out as beta (NaN where its mean does)
  // exactly as on the CPU EP, instead of a normalization no fp32 evaluation of the graph gives.
  double mean = 0;
  for (int64_t i = 0; i < d; ++i) mean += in[i];
  mean = in_fp32_range(mean) / static_cast<double>(d);
  double var = 0;
  for (int64_t i = 0; i < d; ++i) var += (in[i] - mean) * (in[i] - mean);
  var = in_fp32_range(var) / static_cast<double>(d);
  const double inv = 1.0 / std::sqrt(var + static_cast<double>(epsilon));
  for (int64_t i = 0; i < d; ++i) {
    const double v = (in[i] - mean) * inv * gamma[i];
    out[i] = static_cast<float>(beta ? v + beta[i] : v);
  }
}

#if NPUFLOW_HAVE_AVX2_KERNELS
NPUFLOW_TARGET_AVX2 void layer_norm_row_avx2(const float* in, int64_t d, const float* gamma,
                                             const float* beta, float epsilon, float* out) {
  // Two passes (mean, then the centred squares) in eight lanes, as exact as the double loop to
  // well under the gates and free of E[x^2] - E[x]^2 cancellation.
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) acc = _mm256_add_ps(acc, _mm256_loadu_ps(in + i));
  float sum = avx2::horizontal_sum(acc);
  for (; i < d; ++i) sum += in[i];
  const float mean = sum / static_cast<float>(d);
  const __m256 mean_v = _mm256_set1_ps(mean);
  acc = _mm256_setzero_ps();
  for (i = 0; i + 8 <= d; i += 8) {
    const __m256 c = _mm256_sub_ps(_mm256_loadu_ps(in + i), mean_v);
    acc = _mm256_fmadd_ps(c, c, acc);
  }
  float squares = avx2::horizontal_sum(acc);
  for (; i < d; ++i) squares += (in[i] - mean) * (in[i] - mean);
  const float inv = static_cast<float>(
      1.0 / std::sqrt(static_cast<double>(squares) / static_cast<double>(d) + epsilon));
  const __m256 inv_v = _mm256_set1_ps(inv);
  for (i = 0; i + 8 <= d; i += 8) {
    const __m256 c = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(in + i), mean_v), inv_v);
    const __m256 g = _mm256_loadu_ps(gamma + i);
    const __m256 y = beta ? _mm256_fmadd_ps(c, g, _mm256_loadu_ps(beta + i)) : _mm256_mul_ps(c, g);
    _mm256_storeu_ps(out + i, y);
  }
  for (; i < d; ++i) {
    const float c = (in[i] - mean) * inv * gamma[i];
    out[i] = beta ? c + beta[i] : c;
  }
}

NPUFLOW_TARGET_AVX2 __m256 activate_avx2(VectorActivation kind, __m256 x) {
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
  switch (kind) {
    case VectorActivation::kGeluErf: {
      const __m256 e = avx2::erf(_mm256_mul_ps(x, _mm256_set1_ps(0.70710678118654752f)));
      return _mm256_mul_ps(_mm256_mul_ps(half, x), _mm256_add_ps(one, e));
    }
    case VectorActivation::kGeluTanh: {
      const __m256 cube = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
      const __m256 inner = _mm256_mul_ps(_mm256_set1_ps(0.79788456080286536f),
                                         _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), cube, x));
      return _mm256_mul_ps(_mm256_mul_ps(half, x), _mm256_add_ps(one, avx2::tanh(inner)));
    }
    case VectorActivation::kQuickGelu: {
      const __m256 e = avx2::exp(_mm256_mul_ps(_mm256_set1_ps(-1.702f), x));
      return _mm256_div_ps(x, _mm256_add_ps(one, e));
    }
  }
  return x;
}

NPUFLOW_TARGET_AVX2 void activate_span_avx2(VectorActivation kind, const float* x, float* y,
                                            int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, activate_avx2(kind, _mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] = activate_scalar(kind, x[i]);
}

NPUFLOW_TARGET_AVX2 void gated_span_avx2(VectorActivation kind, const float* act, const float* gate,
                                         float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 a = activate_avx2(kind, _mm256_loadu_ps(act + i));
    _mm256_storeu_ps(y + i, _mm256_mul_ps(a, _mm256_loadu_ps(gate + i)));
  }
  for (; i < n; ++i) y[i] = activate_scalar(kind, act[i]) * gate[i];
}
#endif

}  // namespace

void layer_norm(const float* x, int64_t rows, int64_t d, const float* gamma, const float* beta,
                float epsilon, float* y, const ExecContext& context) {
  const bool vectorized = avx2_kernels_active();
  for_row_chunks(rows, d, context, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
#if NPUFLOW_HAVE_AVX2_KERNELS
      if (vectorized) {
        layer_norm_row_avx2(x + r * d, d, gamma, beta, epsilon, y + r * d);
        continue;
      }
#endif
      (void)vectorized;
      layer_norm_row_scalar(x + r * d, d, gamma, beta, epsilon, y + r * d);
    }
  });
}

void activate_rows(VectorActivation kind, const float* x, int64_t x_stride, float* y,
                   int64_t y_stride, int64_t rows, int64_t cols, const ExecContext& context) {
  const bool vectorized = avx2_kernels_active();
  for_row_chunks(rows, cols, context, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* in = x + r * x_stride;
      float* out = y + r * y_stride;
#if NPUFLOW_HAVE_AVX2_KERNELS
      if (vectorized) {
        activate_span_avx2(kind, in, out, cols);
        continue;
      }
#endif
      (void)vectorized;
      for (int64_t i = 0; i < cols; ++i) out[i] = activate_scalar(kind, in[i]);
    }
  });
}

void gated_activation(VectorActivation kind, const float* x, int64_t act_at, int64_t gate_at,
                      float* y, int64_t rows, int64_t cols) {
  // Sequential over rows: row r's results may overwrite what row r-1 read, never what a later
  // row reads, so the rows cannot be split across threads.
  const bool vectorized = avx2_kernels_active();
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * 2 * cols;
    float* out = y + r * cols;
#if NPUFLOW_HAVE_AVX2_KERNELS
    if (vectorized) {
      gated_span_avx2(kind, in + act_at, in + gate_at, out, cols);
      continue;
    }
#endif
    (void)vectorized;
    for (int64_t i = 0; i < cols; ++i)
      out[i] = activate_scalar(kind, in[act_at + i]) * in[gate_at + i];
  }
}

void add_residual(float* h, const float* branch, const float* scale, int64_t rows, int64_t d) {
  // Plain loops: the compiler vectorizes them for whatever ISA the build targets.
  if (scale == nullptr) {
    const int64_t n = rows * d;
    for (int64_t i = 0; i < n; ++i) h[i] += branch[i];
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    float* out = h + r * d;
    const float* in = branch + r * d;
    for (int64_t c = 0; c < d; ++c) out[c] += in[c] * scale[c];
  }
}

}  // namespace npuflow
