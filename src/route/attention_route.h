// Where an encoder's attention runs when its projections run on an NPU: on the device
// (Device::attention_fp16, librocketnpu's flash attention) or on the host (ops/host_attention.h,
// fp32). Per-head NPU attention pays every head's submits and packs both operands per call, so it
// loses at short sequences and wins only where the quadratic work outgrows them; `auto` asks the
// board model which (the `attention` knob).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace npuflow {

enum class AttentionPlacement { kAuto, kDevice, kHost };

std::optional<AttentionPlacement> parse_attention_placement(std::string_view text);

struct AttentionRouteQuery {
  int64_t head_dim = 0;
  int64_t heads = 0;
  int workers = 5;  // worker fds of the library (ROCKET_N_THREADS' default)
};

// Modelled RK3588 microseconds of one sequence's self-attention over `tokens` tokens: on the NPU
// (CostModel::attention plus the fp32 <-> fp16 conversions of Q, K, V and the output on the
// host) and on npuflow's host kernels (both products as GEMM FLOPs on the A76 cores). The
// softmax runs on the host either way and is left out of both.
double device_attention_us(const AttentionRouteQuery& query, int64_t tokens);
double host_attention_us(const AttentionRouteQuery& query, int64_t tokens);

// librocketnpu's flash attention contract on the head size (dv is head_dim here), shared by every
// device as the matmul contract is, so placement does not depend on the device underneath.
inline constexpr int64_t kAttentionHeadDimMultiple = 32;

// The fewest tokens from which attention runs on the device: nullopt (never) for kHost and for a
// head_dim outside the contract; else 1 for kDevice, and for kAuto the first token count (multiples
// of 4 up to 65536) at which the modelled device time is below the host's, nullopt when there is
// none.
std::optional<int64_t> device_attention_min_tokens(AttentionPlacement placement,
                                                   const AttentionRouteQuery& query);

}  // namespace npuflow
