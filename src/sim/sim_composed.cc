// SimDevice's composed calls: librocketnpu's flash attention and convolutions (sim_attention.*,
// sim_conv.*), admitted, priced and fault-injected like its GEMMs.
#include <chrono>
#include <mutex>

#include "core/fp16.h"
#include "host/fp16_conv.h"
#include "sim/sim_attention.h"
#include "sim/sim_conv.h"
#include "sim/sim_device_state.h"

namespace npuflow::sim {

namespace {

// A contract refusal, counted.
Status refusing(SimDevice::State& state, Status shape) {
  if (!shape.is_ok()) state.refused();
  return shape;
}

// One composed call (attention, convolution) that passed its contract: counted (`kind` among
// the calls), failed (its output garbage) or picked for corruption by the injection options,
// charged `cost` and `cpu_us` (the same work on the board's CPU), then `compute` run and its wall
// time kept; a corrupted call's first output element goes far off.
template <typename Compute>
Status run_composed(SimDevice::State& state, int64_t SimProfile::*kind, const CostEstimate& cost,
                    double cpu_us, uint16_t* out, size_t out_count, Compute&& compute) {
  bool corrupt = false;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    state.profile.*kind += 1;
    auto admitted = state.admit_locked(cost, cpu_us, out, out_count * sizeof(uint16_t));
    if (!admitted.is_ok()) return admitted.status();
    corrupt = admitted.value();
  }
  const auto start = std::chrono::steady_clock::now();
  compute();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (corrupt) out[0] = float_to_half_bits(corrupted(half_bits_to_float(out[0])));
  std::lock_guard<std::mutex> lock(state.mutex);
  state.profile.emulation_ms += ms;
  return Status::ok();
}

// A convolution priced as its one GEMM.
template <typename Compute>
Status run_convolution(SimDevice::State& state, const ConvGemm& gemm, uint16_t* out,
                       size_t out_count, Compute&& compute) {
  const SimOptions& o = state.options;
  const CostEstimate cost =
      CostModel::convolution(gemm.m, gemm.k, gemm.n, o.workers, o.patched_kernel);
  return run_composed(state, &SimProfile::conv_calls, cost,
                      CostModel::cpu_us(NpuType::kFp16, gemm.m, gemm.k, gemm.n), out, out_count,
                      compute);
}

}  // namespace

Status SimDevice::attention_fp16(const Fp16Attention& call, const ExecContext& context) {
  NPUFLOW_RETURN_IF_ERROR(check_attention_call(call));
  NPUFLOW_RETURN_IF_ERROR(refusing(*state_, check_attention_shape(call)));
  const SimOptions& o = state_->options;
  const CostEstimate cost =
      CostModel::attention(call.tokens, call.kv, call.head_dim, call.dv, call.heads, o.workers,
                           o.patched_kernel, attention_bias_bytes(call));
  const double cpu_us = static_cast<double>(call.heads) *
                        (CostModel::cpu_us(NpuType::kFp16, call.tokens, call.head_dim, call.kv) +
                         CostModel::cpu_us(NpuType::kFp16, call.tokens, call.kv, call.dv));
  return run_composed(*state_, &SimProfile::attention_calls, cost, cpu_us, call.out,
                      static_cast<size_t>(call.heads * call.tokens * call.dv),
                      [&] { flash_attention(call, context); });
}

Status SimDevice::conv2d_fp16(const Fp16Conv2d& call, const ExecContext& context) {
  NPUFLOW_RETURN_IF_ERROR(check_conv2d_call(call));
  NPUFLOW_RETURN_IF_ERROR(refusing(*state_, check_conv2d_shape(call)));
  const auto out_count =
      static_cast<size_t>(call.oc * conv2d_output_height(call) * conv2d_output_width(call));
  return run_convolution(*state_, conv2d_gemm(call), call.out, out_count,
                         [&] { fp16_conv2d_reference(call, context); });
}

Status SimDevice::conv_transpose2d_fp16(const Fp16ConvTranspose2d& call,
                                        const ExecContext& context) {
  NPUFLOW_RETURN_IF_ERROR(check_conv_transpose2d_call(call));
  NPUFLOW_RETURN_IF_ERROR(refusing(*state_, check_conv_transpose2d_shape(call)));
  const auto out_count = static_cast<size_t>(call.oc * conv_transpose2d_output_height(call) *
                                             conv_transpose2d_output_width(call));
  return run_convolution(*state_, conv_transpose2d_gemm(call), call.out, out_count,
                         [&] { fp16_conv_transpose2d_reference(call, context); });
}

}  // namespace npuflow::sim
