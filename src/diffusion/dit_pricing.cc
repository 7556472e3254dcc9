#include "diffusion/dit_pricing.h"

#include "sim/board_cpu_model.h"
#include "sim/cost_model.h"

namespace npuflow::diffusion {
namespace {

using sim::CpuPool;
using sim::CpuWork;
using sim::CpuWorkClass;

double npu_gemm_us(int64_t m, int64_t k, int64_t n) {
  sim::CostQuery query;
  query.m = m;
  query.k = k;
  query.n = n;
  return sim::CostModel::npu(query).total_us();
}

double host_us(CpuWorkClass work_class, double amount, double bytes, int kernels = 1) {
  CpuWork work;
  work.work_class = work_class;
  work.bytes = bytes;
  work.kernels = kernels;
  if (work_class == CpuWorkClass::kGemm) work.flops = amount;
  if (work_class == CpuWorkClass::kTranscendental) work.elements = amount;
  return sim::board_cpu_us(work, CpuPool::kNpuflowHost);
}

}  // namespace

DitConfig anima_config() {
  DitConfig c;
  c.hidden = 2048;
  c.heads = 16;
  c.blocks = 28;
  c.mlp_ratio = 4;
  c.adaln_rank = 256;
  c.context_dim = 1024;
  c.context_tokens = 512;
  c.latent_channels = 16;
  c.patch = 2;
  c.image_tokens = 1024;
  c.rope_split = {44, 42, 42};
  return c;
}

DitDenoiseCost price_dit_denoise(const DitConfig& c, int64_t tokens, int64_t forwards) {
  const int64_t d = c.hidden, n = tokens, r = c.adaln_rank, lc = c.context_tokens;
  const int64_t hd = c.head_dim(), ff = c.mlp_ratio * d;
  const double f32 = 4.0, f16 = 2.0;
  const double stream = double(n) * d * f32;  // one fp32 pass over the stream

  // Per block, on the NPU: the projections (weights resident) and self-attention.
  const double projections =
      npu_gemm_us(n, d, 3 * d) + npu_gemm_us(n, d, d) +                      // QKV, self out
      npu_gemm_us(n, d, d) + npu_gemm_us(lc, c.context_dim, 2 * d) +         // cross q, k|v
      npu_gemm_us(n, d, d) + npu_gemm_us(n, d, ff) + npu_gemm_us(n, ff, d);  // cross out, MLP
  // The AdaLN modulators' two GEMVs per sub-layer run on the host with the modulation.
  const double modulator_flops = 3 * 2.0 * (double(d) * r + double(r) * 3 * d);
  const double modulators = host_us(CpuWorkClass::kGemm, modulator_flops, modulator_flops * 2, 6);
  const double self_attention =
      sim::CostModel::attention(n, n, hd, hd, c.heads, 5, /*patched_kernel=*/true).total_us();
  const double cross_attention =
      sim::CostModel::attention(n, lc, hd, hd, c.heads, 5, /*patched_kernel=*/true).total_us();
  // On the host: three modulated LayerNorms and gated residuals, QK-norm and RoPE on q and k,
  // GELU on the MLP's hidden, and the fp32 <-> fp16 conversions of every projection's input and
  // output.
  const double norms_and_residuals =
      host_us(CpuWorkClass::kStreaming, 0, 3 * (2 * stream) + 3 * (3 * stream), 6);
  const double qk_norm_rope = host_us(CpuWorkClass::kStreaming, 0, 2 * 2 * (2 * stream), 4);
  const double gelu = host_us(CpuWorkClass::kTranscendental, double(n) * ff, 2.0 * n * ff * f32);
  const double converted = double(n) * (d + 3 * d + d + d + d + d + ff + ff + d) +
                           double(lc) * (c.context_dim + 2 * d);  // elements in and out
  const double conversions = host_us(CpuWorkClass::kStreaming, 0, converted * (f32 + f16), 9);

  // Once per forward: patch embedding, timestep MLP, final layer.
  const int64_t features = c.patch_features(), out = c.latent_channels * c.patch * c.patch;
  const double shared = npu_gemm_us(n, features, d) + npu_gemm_us(n, d, out);
  // The timestep MLP and the final modulator, on the host (M=1).
  const double shared_host_flops =
      2.0 * (double(d) * d + double(d) * 3 * d + double(d) * r + double(r) * 2 * d);
  const double shared_host =
      host_us(CpuWorkClass::kGemm, shared_host_flops, shared_host_flops * 2, 4);

  DitDenoiseCost cost;
  const double blocks = double(c.blocks);
  cost.phases = {
      {"projections", true, blocks * projections + shared},
      {"AdaLN modulators, timestep MLP (host)", false, blocks * modulators + shared_host},
      {"self-attention", true, blocks * self_attention},
      {"cross-attention", true, blocks * cross_attention},
      {"norms, modulation, residuals (host)", false, blocks * norms_and_residuals},
      {"QK-norm and RoPE (host)", false, blocks * qk_norm_rope},
      {"GELU (host)", false, blocks * gelu},
      {"fp32 <-> fp16 (host)", false, blocks * conversions},
  };
  for (const DitPhaseCost& phase : cost.phases) cost.us_per_forward += phase.us_per_forward;
  cost.forwards = forwards;
  return cost;
}

}  // namespace npuflow::diffusion
