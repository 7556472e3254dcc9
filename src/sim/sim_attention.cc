#include "sim/sim_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/fp16.h"
#include "core/strings.h"
#include "sim/rk3588_contract.h"
#include "sim/sim_numerics.h"

namespace npuflow::sim {
namespace {

// The K tile the library's planner picks for an unpacked m x k x n fp16 product (the whole K
// when no plan fits: the chained path then still sums tiles on the host, as one).
int64_t k_tile(int64_t m, int64_t k, int64_t n) {
  auto plan = plan_tiles(NpuType::kFp16, round_up(m, 4), round_up(k, 32), round_up(n, 16));
  return plan.is_ok() ? std::min(plan.value().kt, k) : k;
}

void widen(const uint16_t* half, size_t count, float* out) {
  for (size_t i = 0; i < count; ++i) out[i] = half_bits_to_float(half[i]);
}

}  // namespace

Status check_attention_shape(const Fp16Attention& call) {
  if (call.head_dim % 32 != 0 || call.dv % 16 != 0) {
    return unsupported(str_cat("ROCKET_E_SHAPE: flash attention needs head_dim % 32 and dv % 16 (",
                               call.head_dim, ", ", call.dv, ")"));
  }
  return Status::ok();
}

void flash_attention(const Fp16Attention& call, const ExecContext& context) {
  const int64_t t = call.tokens, kv = call.kv, hd = call.head_dim, dv = call.dv;
  const int64_t group = call.heads / call.kv_heads;
  const int64_t score_kt = k_tile(t, hd, kv), value_kt = k_tile(t, kv, dv);
  constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();
  context.run(static_cast<size_t>(call.heads), [&](size_t index) {
    const auto head = static_cast<int64_t>(index);
    const int64_t kv_head = head / group;
    std::vector<float> q(static_cast<size_t>(t * hd)), keys_t(static_cast<size_t>(hd * kv));
    widen(call.q + head * t * hd, q.size(), q.data());
    const uint16_t* k = call.k + kv_head * kv * hd;
    for (int64_t j = 0; j < kv; ++j) {
      for (int64_t d = 0; d < hd; ++d) keys_t[d * kv + j] = half_bits_to_float(k[j * hd + d]);
    }
    std::vector<uint16_t> scores(static_cast<size_t>(t * kv));
    fp16_slice(q.data(), hd, keys_t.data(), kv, SliceRows{0, t, 0, kv, hd, score_kt},
               Fp16Accumulation::kHostFp32, scores.data(), kv);

    std::vector<float> p(static_cast<size_t>(t * kv)), row(static_cast<size_t>(kv));
    for (int64_t i = 0; i < t; ++i) {
      float max = kMinusInfinity;
      for (int64_t j = 0; j < kv; ++j) {
        float s = scaled_attention_score(call, half_bits_to_float(scores[i * kv + j]));
        if (call.mask != nullptr) s += half_bits_to_float(call.mask[i * kv + j]);
        row[j] = s;
      }
      add_relative_bias(call, head, i, row.data());
      for (int64_t j = 0; j < kv; ++j) max = std::max(max, row[j]);
      float* out = p.data() + i * kv;
      if (max == kMinusInfinity) {
        std::fill(out, out + kv, 0.0f);
        continue;
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < kv; ++j) {
        row[j] = round_to_half(std::exp(row[j] - max));
        sum += row[j];
      }
      const float inverse = 1.0f / sum;
      for (int64_t j = 0; j < kv; ++j) out[j] = round_to_half(row[j] * inverse);
    }

    std::vector<float> values_t(static_cast<size_t>(kv * dv));
    const uint16_t* v = call.v + kv_head * dv * kv;
    for (int64_t c = 0; c < dv; ++c) {
      for (int64_t j = 0; j < kv; ++j) values_t[j * dv + c] = half_bits_to_float(v[c * kv + j]);
    }
    fp16_slice(p.data(), kv, values_t.data(), dv, SliceRows{0, t, 0, dv, kv, value_kt},
               Fp16Accumulation::kHostFp32, call.out + head * t * dv, dv);
  });
}

}  // namespace npuflow::sim
