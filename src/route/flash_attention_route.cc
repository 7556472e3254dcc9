#include "route/flash_attention_route.h"

#include "core/strings.h"

namespace npuflow {

RouteVerdict route_flash_attention(const FlashAttentionCandidate& c,
                                   const FlashAttentionRouting& routing) {
  auto refuse = [](const char* reason) { return RouteVerdict{false, reason}; };
  // What the device computes first: these hold whatever the sizes.
  if (c.alibi) return refuse("alibi");
  if (c.sinks) return refuse("sinks");
  if (!c.softcap_valid) return refuse("softcap");
  if (!c.queries_f32) return refuse("query_type");
  if (!c.keys_values_f16) return refuse("kv_type");
  if (!c.mask_f16) return refuse("mask_type");
  if (c.mask_per_head) return refuse("mask_per_head");
  if (!c.mask_covers) return refuse("mask_shape");
  if (!c.rows_contiguous) return refuse("rows_not_contiguous");
  if (!c.output_f32) return refuse("output_type");
  if (c.head_dim <= 0 || c.dv <= 0 || c.tokens <= 0 || c.kv <= 0 || c.heads <= 0 ||
      c.kv_heads <= 0 || c.sequences <= 0) {
    return refuse("empty");
  }
  if (c.heads % c.kv_heads != 0) return refuse("heads_not_multiple_of_kv_heads");
  if (c.head_dim % kAttentionHeadDimMultiple != 0) return refuse("head_dim_not_multiple_of_32");
  if (c.dv % kAttentionValueDimMultiple != 0) return refuse("dv_not_multiple_of_16");
  if (c.kv < routing.min_kv) return refuse("kv_below_min");
  if (c.tokens < routing.min_tokens) return refuse("tokens_below_min");
  return RouteVerdict{true, ""};
}

std::string describe(const FlashAttentionCandidate& c) {
  return str_cat("head_dim=", c.head_dim, " dv=", c.dv, " tokens=", c.tokens, " kv=", c.kv,
                 " heads=", c.heads, "/", c.kv_heads, " sequences=", c.sequences);
}

}  // namespace npuflow
