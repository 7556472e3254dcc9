#include "host/fp16_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/fp16.h"

namespace npuflow {

void fp16_attention_reference(const Fp16Attention& call, const ExecContext& context) {
  const int64_t t = call.tokens, kv = call.kv, hd = call.head_dim, dv = call.dv;
  const int64_t group = call.heads / call.kv_heads;
  context.run(static_cast<size_t>(call.heads), [&](size_t index) {
    const auto head = static_cast<int64_t>(index);
    const int64_t kv_head = head / group;
    const uint16_t* q = call.q + head * t * hd;
    const uint16_t* k = call.k + kv_head * kv * hd;
    const uint16_t* v = call.v + kv_head * dv * kv;
    std::vector<float> keys(static_cast<size_t>(kv * hd)), values(static_cast<size_t>(dv * kv));
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = half_bits_to_float(k[i]);
    for (size_t i = 0; i < values.size(); ++i) values[i] = half_bits_to_float(v[i]);
    std::vector<float> query(static_cast<size_t>(hd)), p(static_cast<size_t>(kv));
    for (int64_t row = 0; row < t; ++row) {
      for (int64_t d = 0; d < hd; ++d) query[d] = half_bits_to_float(q[row * hd + d]);
      float max = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < kv; ++j) {
        float dot = 0.0f;
        for (int64_t d = 0; d < hd; ++d) dot += query[d] * keys[j * hd + d];
        float score = call.scale * dot;
        if (call.mask != nullptr) score += half_bits_to_float(call.mask[row * kv + j]);
        p[j] = score;
        max = std::max(max, score);
      }
      uint16_t* out = call.out + (head * t + row) * dv;
      if (max == -std::numeric_limits<float>::infinity()) {
        std::fill(out, out + dv, uint16_t{0});
        continue;
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < kv; ++j) {
        p[j] = std::exp(p[j] - max);
        sum += p[j];
      }
      const float inverse = 1.0f / sum;
      for (int64_t c = 0; c < dv; ++c) {
        float acc = 0.0f;
        for (int64_t j = 0; j < kv; ++j) acc += p[j] * values[c * kv + j];
        out[c] = float_to_half_bits(acc * inverse);
      }
    }
  });
}

}  // namespace npuflow
