#include "route/attention_route.h"

#include "sim/board_cpu_model.h"
#include "sim/cost_model.h"

namespace npuflow {

std::optional<AttentionPlacement> parse_attention_placement(std::string_view text) {
  if (text == "auto") return AttentionPlacement::kAuto;
  if (text == "device") return AttentionPlacement::kDevice;
  if (text == "host") return AttentionPlacement::kHost;
  return std::nullopt;
}

double device_attention_us(const AttentionRouteQuery& query, int64_t tokens) {
  const sim::CostEstimate npu =
      sim::CostModel::attention(tokens, tokens, query.head_dim, query.head_dim, query.heads,
                                query.workers, /*patched_kernel=*/true);
  sim::CpuWork conversions;
  conversions.work_class = sim::CpuWorkClass::kStreaming;
  // q, k, v in and the output back: fp32 read, fp16 written (and the reverse), 6 bytes each.
  conversions.bytes = 4.0 * static_cast<double>(tokens * query.head_dim * query.heads) * 6.0;
  return npu.total_us() + sim::board_cpu_us(conversions, sim::CpuPool::kNpuflowHost);
}

double host_attention_us(const AttentionRouteQuery& query, int64_t tokens) {
  sim::CpuWork products;
  products.work_class = sim::CpuWorkClass::kGemm;
  const auto t = static_cast<double>(tokens);
  products.flops = 4.0 * t * t * static_cast<double>(query.head_dim * query.heads);
  return sim::board_cpu_us(products, sim::CpuPool::kNpuflowHost);
}

std::optional<int64_t> device_attention_min_tokens(AttentionPlacement placement,
                                                   const AttentionRouteQuery& query) {
  if (placement == AttentionPlacement::kHost || query.head_dim <= 0 || query.heads <= 0 ||
      query.head_dim % kAttentionHeadDimMultiple != 0) {
    return std::nullopt;
  }
  if (placement == AttentionPlacement::kDevice) return 1;
  for (int64_t tokens = 4; tokens <= 65536; tokens += tokens < 1024 ? 4 : 64) {
    if (device_attention_us(query, tokens) < host_attention_us(query, tokens)) return tokens;
  }
  return std::nullopt;
}

}  // namespace npuflow
