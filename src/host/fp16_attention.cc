#include "host/fp16_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/fp16.h"

namespace npuflow {
namespace {

// Query rows per task: a block's scores (kQueryBlock x kv floats) stay in cache between the
// products, and each head-dim row of K^T (kv floats) is read once per block instead of per row.
constexpr int64_t kQueryBlock = 8;

}  // namespace

// Every sum runs in a fixed order (the dot products over d ascending, the softmax sum and P V over
// the keys ascending), whatever the blocking: the loops are laid out so that the compiler
// vectorizes across keys (scores) and output columns (P V), never across a sum.
void fp16_attention_reference(const Fp16Attention& call, const ExecContext& context) {
  const int64_t t = call.tokens, kv = call.kv, hd = call.head_dim, dv = call.dv;
  const int64_t group = call.heads / call.kv_heads;
  // K^T (hd x kv) and V^T (kv x dv) of each kv head, widened once.
  std::vector<float> keys_t(static_cast<size_t>(call.kv_heads * hd * kv));
  std::vector<float> values_t(static_cast<size_t>(call.kv_heads * kv * dv));
  context.run(static_cast<size_t>(call.kv_heads), [&](size_t index) {
    const auto kv_head = static_cast<int64_t>(index);
    const uint16_t* k = call.k + kv_head * kv * hd;
    const uint16_t* v = call.v + kv_head * dv * kv;
    float* kt = keys_t.data() + kv_head * hd * kv;
    float* vt = values_t.data() + kv_head * kv * dv;
    for (int64_t j = 0; j < kv; ++j) {
      for (int64_t d = 0; d < hd; ++d) kt[d * kv + j] = half_bits_to_float(k[j * hd + d]);
    }
    for (int64_t c = 0; c < dv; ++c) {
      for (int64_t j = 0; j < kv; ++j) vt[j * dv + c] = half_bits_to_float(v[c * kv + j]);
    }
  });
  const int64_t blocks = (t + kQueryBlock - 1) / kQueryBlock;
  context.run(static_cast<size_t>(call.heads * blocks), [&](size_t task) {
    const int64_t head = static_cast<int64_t>(task) / blocks;
    const int64_t first = static_cast<int64_t>(task) % blocks * kQueryBlock;
    const int64_t rows = std::min(kQueryBlock, t - first);
    const int64_t kv_head = head / group;
    const float* kt = keys_t.data() + kv_head * hd * kv;
    const float* vt = values_t.data() + kv_head * kv * dv;
    thread_local std::vector<float> query, scores, acc;
    query.resize(static_cast<size_t>(rows * hd));
    scores.assign(static_cast<size_t>(rows * kv), 0.0f);
    acc.resize(static_cast<size_t>(dv));
    const uint16_t* q = call.q + (head * t + first) * hd;
    for (int64_t i = 0; i < rows * hd; ++i) query[i] = half_bits_to_float(q[i]);
    for (int64_t d = 0; d < hd; ++d) {
      const float* key_row = kt + d * kv;
      for (int64_t r = 0; r < rows; ++r) {
        const float qd = query[r * hd + d];
        float* s = scores.data() + r * kv;
        for (int64_t j = 0; j < kv; ++j) s[j] += qd * key_row[j];
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t row = first + r;
      float* p = scores.data() + r * kv;
      float max = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < kv; ++j) {
        float score = scaled_attention_score(call, p[j]);
        if (call.mask != nullptr) score += half_bits_to_float(call.mask[row * kv + j]);
        p[j] = score;
      }
      add_relative_bias(call, head, row, p);
      for (int64_t j = 0; j < kv; ++j) max = std::max(max, p[j]);
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
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < kv; ++j) {
        const float pj = p[j];
        const float* value_row = vt + j * dv;
        for (int64_t c = 0; c < dv; ++c) acc[c] += pj * value_row[c];
      }
      for (int64_t c = 0; c < dv; ++c) out[c] = float_to_half_bits(acc[c] * inverse);
    }
  });
}

}  // namespace npuflow
