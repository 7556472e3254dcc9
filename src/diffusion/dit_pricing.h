// What a DiT denoise would take on an RK3588 board, partitioned as src/diffusion/dit_model.cc
// runs it: the projections and both attentions priced by the simulator's NPU cost model (weights
// resident, fp16), the host work (AdaLN modulation with its GEMVs, norms, QK-norm, RoPE, GELU,
// gated residuals, fp16 conversions) by its model of the board's A76 cores. `npuflow plan --dit`
// prints it beside seed 002's measured Anima run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "diffusion/dit_model.h"

namespace npuflow::diffusion {

// Anima's published configuration (reference/spectrum.md section 4): D 2048, 16 heads x 128,
// 28 blocks, context 512 x 1024, a 16 x 128 x 128 latent (1024 tokens).
DitConfig anima_config();

struct DitPhaseCost {
  std::string name;
  bool on_npu = false;
  double us_per_forward = 0;  // summed over the blocks (and the shared layers)
};

struct DitDenoiseCost {
  std::vector<DitPhaseCost> phases;
  double us_per_forward = 0;
  int64_t forwards = 0;
  double seconds() const { return us_per_forward * forwards * 1e-6; }
};

// tokens: image tokens per forward; forwards: model evaluations of the denoise (CFG passes
// counted).
DitDenoiseCost price_dit_denoise(const DitConfig& config, int64_t tokens, int64_t forwards);

}  // namespace npuflow::diffusion
