#include "ggml/ggml_flash_attn.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/fp16.h"
#include "core/strings.h"
#include "ggml/ggml_fault.h"
#include "ggml/ggml_guard.h"
#include "ggml/ggml_matmul.h"
#include "host/fp16_attention.h"

namespace npuflow::ggml {
namespace {

struct Params {
  float scale = 1.0f, max_bias = 0.0f, softcap = 0.0f;
};

Params params_of(const ggml_tensor* node) {
  Params p;
  std::memcpy(&p.scale, reinterpret_cast<const float*>(node->op_params) + 0, sizeof(float));
  std::memcpy(&p.max_bias, reinterpret_cast<const float*>(node->op_params) + 1, sizeof(float));
  std::memcpy(&p.softcap, reinterpret_cast<const float*>(node->op_params) + 2, sizeof(float));
  return p;
}

// The address of element (i0, i1, i2, i3) of `t`, through its strides.
const char* element(const ggml_tensor* t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return static_cast<const char*>(t->data) + i0 * static_cast<int64_t>(t->nb[0]) +
         i1 * static_cast<int64_t>(t->nb[1]) + i2 * static_cast<int64_t>(t->nb[2]) +
         i3 * static_cast<int64_t>(t->nb[3]);
}

uint16_t half_at(const ggml_tensor* t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  uint16_t bits;
  std::memcpy(&bits, element(t, i0, i1, i2, i3), sizeof(bits));
  return bits;
}

}  // namespace

// q [head_dim, tokens, heads, seqs] f32; k [head_dim, kv, kv_heads, seqs] and v [dv, kv, kv_heads,
// seqs] (not transposed); mask [kv, >= tokens, 1, seqs or a divisor] f16; out [dv, heads, tokens,
// seqs] f32 (ggml.h, ggml_flash_attn_ext).
FlashAttentionCandidate describe_flash_attn(const ggml_tensor* node) {
  FlashAttentionCandidate c;
  const ggml_tensor* q = node->src[0];
  const ggml_tensor* k = node->src[1];
  const ggml_tensor* v = node->src[2];
  const ggml_tensor* mask = node->src[3];
  if (q == nullptr || k == nullptr || v == nullptr) return c;
  const Params p = params_of(node);
  c.alibi = p.max_bias != 0.0f;
  c.sinks = node->src[4] != nullptr;
  c.softcap_valid = std::isfinite(p.softcap) && p.softcap >= 0.0f && std::isfinite(p.scale);
  c.queries_f32 = q->type == GGML_TYPE_F32;
  c.keys_values_f16 = k->type == GGML_TYPE_F16 && v->type == GGML_TYPE_F16;
  c.output_f32 = node->type == GGML_TYPE_F32 && node->nb[0] == sizeof(float) &&
                 node->ne[0] == v->ne[0] && node->ne[1] == q->ne[2] && node->ne[2] == q->ne[1] &&
                 node->ne[3] == q->ne[3];
  c.rows_contiguous =
      q->nb[0] == sizeof(float) && k->nb[0] == sizeof(uint16_t) && v->nb[0] == sizeof(uint16_t);
  if (mask != nullptr) {
    c.mask_f16 = mask->type == GGML_TYPE_F16;
    c.mask_per_head = mask->ne[2] != 1;
    c.mask_covers = mask->ne[0] >= k->ne[1] && mask->ne[1] >= q->ne[1] && mask->ne[3] > 0 &&
                    q->ne[3] % mask->ne[3] == 0;
  }
  c.head_dim = q->ne[0] == k->ne[0] ? q->ne[0] : -1;
  c.dv = v->ne[0];
  c.tokens = q->ne[1];
  c.kv = k->ne[1] == v->ne[1] ? k->ne[1] : -1;
  c.heads = q->ne[2];
  c.kv_heads = k->ne[2] == v->ne[2] ? k->ne[2] : -1;
  c.sequences = q->ne[3] == k->ne[3] && q->ne[3] == v->ne[3] ? q->ne[3] : -1;
  return c;
}

Status FlashAttnEngine::compute(const ggml_tensor* node, const ExecContext& context) {
  const FlashAttentionCandidate c = describe_flash_attn(node);
  // Structure must hold whatever called us; the size thresholds are the scheduler's business.
  const RouteVerdict verdict = route_flash_attention(c, FlashAttentionRouting{1, 1});
  if (!verdict.accept) {
    return unsupported(
        str_cat("FLASH_ATTN_EXT '", node->name, "' (", describe(c), ") refused: ", verdict.reason));
  }
  const ggml_tensor* q = node->src[0];
  const ggml_tensor* k = node->src[1];
  const ggml_tensor* v = node->src[2];
  const ggml_tensor* mask = node->src[3];
  const Params p = params_of(node);
  const int64_t t = c.tokens, kv = c.kv, hd = c.head_dim, dv = c.dv;
  std::vector<uint16_t> queries(static_cast<size_t>(c.heads * t * hd));
  std::vector<uint16_t> keys(static_cast<size_t>(c.kv_heads * kv * hd));
  std::vector<uint16_t> values(static_cast<size_t>(c.kv_heads * dv * kv));
  std::vector<uint16_t> mask_rows(mask != nullptr ? static_cast<size_t>(t * kv) : 0);
  std::vector<uint16_t> out(static_cast<size_t>(c.heads * t * dv));
  bool any_fallback = false;
  for (int64_t seq = 0; seq < c.sequences; ++seq) {
    // Operands in the device's layout: q [heads][tokens][hd], k [kv_heads][kv][hd],
    // v [kv_heads][dv][kv] (transposed), mask [tokens][kv].
    context.run(static_cast<size_t>(c.heads), [&](size_t index) {
      const auto h = static_cast<int64_t>(index);
      for (int64_t i = 0; i < t; ++i) {
        const auto* row = reinterpret_cast<const float*>(element(q, 0, i, h, seq));
        uint16_t* dst = queries.data() + (h * t + i) * hd;
        for (int64_t d = 0; d < hd; ++d) dst[d] = float_to_half_bits(row[d]);
      }
    });
    context.run(static_cast<size_t>(c.kv_heads), [&](size_t index) {
      const auto g = static_cast<int64_t>(index);
      for (int64_t j = 0; j < kv; ++j) {
        std::memcpy(keys.data() + (g * kv + j) * hd, element(k, 0, j, g, seq),
                    static_cast<size_t>(hd) * sizeof(uint16_t));
        const auto* row = reinterpret_cast<const uint16_t*>(element(v, 0, j, g, seq));
        for (int64_t col = 0; col < dv; ++col) values[(g * dv + col) * kv + j] = row[col];
      }
    });
    if (mask != nullptr) {
      const int64_t mask_seq = seq % mask->ne[3];
      for (int64_t i = 0; i < t; ++i) {
        uint16_t* dst = mask_rows.data() + i * kv;
        if (mask->nb[0] == sizeof(uint16_t)) {  // ggml's masks: rows of contiguous halves
          std::memcpy(dst, element(mask, 0, i, 0, mask_seq), static_cast<size_t>(kv) * 2);
        } else {
          for (int64_t j = 0; j < kv; ++j) dst[j] = half_at(mask, j, i, 0, mask_seq);
        }
      }
    }
    Fp16Attention call{t,
                       kv,
                       hd,
                       dv,
                       c.heads,
                       c.kv_heads,
                       p.scale,
                       queries.data(),
                       keys.data(),
                       values.data(),
                       mask != nullptr ? mask_rows.data() : nullptr,
                       out.data()};
    call.softcap = p.softcap;
    bool fallback = false;
    NPUFLOW_RETURN_IF_ERROR(fallback_.run(
        [&] {
          return status_of([&] {
            throw_if_injected(FaultPoint::kDeviceCompute);
            return device_.attention_fp16(call, context);
          });
        },
        [&] {
          fallback = true;
          fp16_attention_reference(call, context);
          return Status::ok();
        },
        fallbacks_, logger_,
        [&](const Status& status) {
          return str_cat("device ", device_.name(), " could not run FLASH_ATTN_EXT '", node->name,
                         "' (", describe(c), "): ", status.to_string(),
                         "; running it on the host reference (said once)");
        }));
    any_fallback = any_fallback || fallback;
    context.run(static_cast<size_t>(c.heads), [&](size_t index) {
      const auto h = static_cast<int64_t>(index);
      for (int64_t i = 0; i < t; ++i) {
        auto* dst = reinterpret_cast<float*>(const_cast<char*>(element(node, 0, h, i, seq)));
        const uint16_t* src = out.data() + (h * t + i) * dv;
        for (int64_t col = 0; col < dv; ++col) dst[col] = half_bits_to_float(src[col]);
      }
    });
  }
  if (logger_.enabled(LogLevel::kTrace)) {
    logger_.trace(str_cat("FLASH_ATTN_EXT '", node->name, "' ", describe(c),
                          any_fallback ? " on host reference" : " on device"));
  }
  calls_++;
  counters().count_flash_attn(any_fallback);
  return Status::ok();
}

std::string FlashAttnEngine::summary() const {
  return str_cat(" flash_attn=", calls_, " flash_attn_fallback=", fallbacks_.load());
}

}  // namespace npuflow::ggml
