#include "ops/host_attention.h"

#include <algorithm>
#include <cmath>

namespace npuflow {

void host_attention(const float* qkv, const AttentionShape& shape, float scale,
                    const AttentionBias& bias, bool nan_to_zero, float* scores_all, float* ctx,
                    const ExecContext& context) {
  const int64_t tokens = shape.tokens, d = shape.hidden, dh = d / shape.heads;
  const int64_t stride = 3 * d;
  context.run(static_cast<size_t>(shape.heads), [&](size_t head) {
    float* scores = scores_all + static_cast<int64_t>(head) * tokens;
    const int64_t off = static_cast<int64_t>(head) * dh;
    for (int64_t i = 0; i < tokens; ++i) {
      const float* q = qkv + i * stride + off;
      const float* row_bias =
          bias.data
              ? bias.data + static_cast<int64_t>(head) * bias.head_stride + i * bias.row_stride
              : nullptr;
      float mx = -INFINITY;
      for (int64_t j = 0; j < tokens; ++j) {
        const float* kk = qkv + j * stride + d + off;
        float dot = 0;
        for (int64_t c = 0; c < dh; ++c) dot += q[c] * kk[c];
        scores[j] = row_bias ? dot * scale + row_bias[j * bias.col_stride] : dot * scale;
        mx = std::max(mx, scores[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < tokens; ++j) {
        scores[j] = std::exp(scores[j] - mx);
        sum += scores[j];
      }
      const float inv = static_cast<float>(1.0 / sum);
      float* out = ctx + i * d + off;
      std::fill(out, out + dh, 0.0f);
      for (int64_t j = 0; j < tokens; ++j) {
        float p = scores[j] * inv;
        if (nan_to_zero && std::isnan(p)) p = 0.0f;
        const float* vv = qkv + j * stride + 2 * d + off;
        for (int64_t c = 0; c < dh; ++c) out[c] += p * vv[c];
      }
    }
  });
}

}  // namespace npuflow
