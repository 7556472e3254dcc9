#include "diffusion/dit_host_ops.h"

#include <algorithm>
#include <cmath>

namespace npuflow::diffusion {
namespace {

constexpr float kNormEps = 1e-6f;

}  // namespace

float silu(float u) {
  return u / (1.0f + std::exp(-u));
}

float gelu_tanh(float u) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * u * (1.0f + std::tanh(kSqrt2OverPi * (u + 0.044715f * u * u * u)));
}

// u / sqrt(mean(u^2) + eps) * weight, over `size` values in place.
void rms_normalize(float* u, int64_t size, const float* weight) {
  double squares = 0.0;
  for (int64_t i = 0; i < size; ++i) squares += double(u[i]) * u[i];
  const float inverse = static_cast<float>(1.0 / std::sqrt(squares / size + kNormEps));
  for (int64_t i = 0; i < size; ++i) u[i] = u[i] * inverse * weight[i];
}

// h = layernorm(x) * (1 + scale) + shift per row; layernorm without affine, population variance.
void modulated_layernorm(const float* x, int64_t rows, int64_t width, const float* shift,
                         const float* scale, float* h, const ExecContext& exec) {
  exec.run(static_cast<size_t>(rows), [&](size_t r) {
    const float* in = x + r * width;
    float* out = h + r * width;
    double sum = 0.0;
    for (int64_t i = 0; i < width; ++i) sum += in[i];
    const double mean = sum / width;
    double squares = 0.0;
    for (int64_t i = 0; i < width; ++i) squares += (in[i] - mean) * (in[i] - mean);
    const float inverse = static_cast<float>(1.0 / std::sqrt(squares / width + kNormEps));
    const float centre = static_cast<float>(mean);
    for (int64_t i = 0; i < width; ++i)
      out[i] = (in[i] - centre) * inverse * (1.0f + scale[i]) + shift[i];
  });
}

// x += gate * f per row.
void gated_residual(float* x, const float* f, const float* gate, int64_t rows, int64_t width) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < width; ++i) x[r * width + i] += gate[i] * f[r * width + i];
}

// Per-head RMSNorm of the `heads` x head_dim values at column `offset` of each row.
void normalize_heads(float* rows, int64_t count, int64_t stride, int64_t offset, int64_t heads,
                     int64_t head_dim, const float* weight, const ExecContext& exec) {
  exec.run(static_cast<size_t>(count), [&](size_t r) {
    for (int64_t e = 0; e < heads; ++e)
      rms_normalize(rows + r * stride + offset + e * head_dim, head_dim, weight);
  });
}

RopeTable rope_table(const DitConfig& c, int64_t rows, int64_t cols) {
  const int64_t pairs = c.head_dim() / 2;
  RopeTable table;
  table.cos.resize(static_cast<size_t>(rows * cols * pairs));
  table.sin.resize(table.cos.size());
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t token = i * cols + j;
      int64_t pair = 0;
      for (int axis = 0; axis < 3; ++axis) {
        const int64_t d = c.rope_split[axis];
        const double position = axis == 0 ? 0.0 : axis == 1 ? double(i) : double(j);
        const double theta =
            axis == 0 ? 10000.0 : 10000.0 * std::pow(4.0, double(d) / double(d - 2));
        for (int64_t p = 0; p < d / 2; ++p, ++pair) {
          const double angle = position * std::pow(theta, -2.0 * double(p) / double(d));
          table.cos[token * pairs + pair] = static_cast<float>(std::cos(angle));
          table.sin[token * pairs + pair] = static_cast<float>(std::sin(angle));
        }
      }
    }
  }
  return table;
}

// Rotates each head's pairs of the `heads` x head_dim values at column `offset` of each row.
void apply_rope(float* rows, int64_t count, int64_t stride, int64_t offset, int64_t heads,
                int64_t head_dim, const RopeTable& table) {
  const int64_t pairs = head_dim / 2;
  for (int64_t r = 0; r < count; ++r) {
    const float* cos = table.cos.data() + r * pairs;
    const float* sin = table.sin.data() + r * pairs;
    for (int64_t e = 0; e < heads; ++e) {
      float* u = rows + r * stride + offset + e * head_dim;
      for (int64_t p = 0; p < pairs; ++p) {
        const float u0 = u[2 * p], u1 = u[2 * p + 1];
        u[2 * p] = u0 * cos[p] - u1 * sin[p];
        u[2 * p + 1] = u0 * sin[p] + u1 * cos[p];
      }
    }
  }
}

// softmax(q k^T / sqrt(hd)) v per head: q [queries][D]; kv [keys][2D] (k | v); out [queries][D].
// Tasks by (head, block of queries); each head's keys transposed once so the score loop runs
// along contiguous keys.
void cross_attention(const float* q, const float* kv, int64_t queries, int64_t keys, int64_t heads,
                     int64_t head_dim, float* out, const ExecContext& exec) {
  const int64_t hidden = heads * head_dim;
  std::vector<float> keys_t(static_cast<size_t>(hidden * keys));  // [head][d][key]
  for (int64_t j = 0; j < keys; ++j)
    for (int64_t c = 0; c < hidden; ++c) keys_t[c * keys + j] = kv[j * 2 * hidden + c];
  constexpr int64_t kQueryBlock = 32;
  const int64_t blocks = (queries + kQueryBlock - 1) / kQueryBlock;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  exec.run(static_cast<size_t>(heads * blocks), [&](size_t task) {
    const int64_t e = static_cast<int64_t>(task) / blocks;
    const int64_t first = (static_cast<int64_t>(task) % blocks) * kQueryBlock;
    std::vector<float> scores(static_cast<size_t>(keys));
    std::vector<double> acc(static_cast<size_t>(head_dim));
    for (int64_t i = first; i < std::min(queries, first + kQueryBlock); ++i) {
      const float* qi = q + i * hidden + e * head_dim;
      std::fill(scores.begin(), scores.end(), 0.0f);
      for (int64_t d = 0; d < head_dim; ++d) {
        const float qd = qi[d] * scale;
        const float* kt = keys_t.data() + (e * head_dim + d) * keys;
        for (int64_t j = 0; j < keys; ++j) scores[j] += qd * kt[j];
      }
      const float top = *std::max_element(scores.begin(), scores.end());
      double total = 0.0;
      for (float& s : scores) {
        s = std::exp(s - top);
        total += s;
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j < keys; ++j) {
        const float* vj = kv + j * 2 * hidden + hidden + e * head_dim;
        for (int64_t d = 0; d < head_dim; ++d) acc[d] += double(scores[j]) * vj[d];
      }
      float* oi = out + i * hidden + e * head_dim;
      for (int64_t d = 0; d < head_dim; ++d) oi[d] = static_cast<float>(acc[d] / total);
    }
  });
}

}  // namespace npuflow::diffusion
