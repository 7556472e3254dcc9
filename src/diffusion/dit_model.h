// An Anima-topology diffusion transformer (docs/diffusion.md), partitioned as seed 002 runs it:
// every projection of the stream on the device through the Device interface, with its weight
// packed once at load (QKV fused into one weight); self- and cross-attention on the device where
// it has the primitive; the AdaLN modulation (its one-row linears included), norms, RoPE, gates
// and the fp32 residual stream on the host.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/log.h"
#include "core/parallel.h"
#include "device/device.h"
#include "diffusion/block_residency.h"
#include "diffusion/safetensors.h"
#include "ops/device_fallback.h"

namespace npuflow::diffusion {

struct DitConfig {
  int64_t hidden = 0, heads = 0, blocks = 0, mlp_ratio = 0, adaln_rank = 0;
  int64_t context_dim = 0, context_tokens = 0, latent_channels = 0, patch = 0;
  int64_t image_tokens = 0;
  std::array<int64_t, 3> rope_split{};  // head_dim over t, h, w
  int64_t head_dim() const { return hidden / heads; }
  int64_t patch_features() const { return (latent_channels + 1) * patch * patch; }
};

// Per-block outputs of one forward, for the gates against the numpy reference.
struct DitTrace {
  std::vector<std::vector<float>> blocks;  // x after block b, [tokens][hidden]
  std::vector<float> final_tokens;         // [tokens][latent_channels * patch^2]
};

struct DitCounters {
  std::atomic<int64_t> evaluations{0};  // forwards
  std::atomic<int64_t> block_packs{0};  // streamed blocks packed for their turn
  std::atomic<int64_t> pack_nanoseconds{0};
  std::atomic<int64_t> linear_fallbacks{0};
  std::atomic<int64_t> attention_on_device{0};
  std::atomic<int64_t> attention_fallbacks{0};
};

struct DitLoadOptions {
  size_t mem_budget_bytes = 0;   // packed weights kept resident (block_residency.h); 0: all
  uint64_t mem_floor_bytes = 0;  // the abort gate on available memory; 0: none
};

class DitModel {
 public:
  // Reads the configuration from the file's metadata and every weight the topology names, and
  // packs the projections onto `device` (kept alive by the caller): the shared layers and the
  // pinned blocks now, the streamed blocks at each of their turns.
  static Result<std::unique_ptr<DitModel>> load(std::shared_ptr<const SafetensorsFile> file,
                                                Device& device, const Logger& logger,
                                                const DitLoadOptions& options = {});

  // velocity = model(latent, sigma, context): latent [C][height][width] (multiples of the patch),
  // context [context_tokens][context_dim] or nullptr for the unconditional (all-zero) context.
  Status forward(const float* latent, int64_t height, int64_t width, float sigma,
                 const float* context, float* velocity, const ExecContext& exec,
                 DitTrace* trace = nullptr);

  const DitConfig& config() const { return config_; }
  const DitCounters& counters() const { return counters_; }
  size_t resident_bytes() const;  // packed now (shared layers and pinned blocks between runs)
  const ResidencyPlan& residency() const { return residency_; }

  struct Linear;  // a packed projection and its host rows (definition in dit_model.cc)
  struct Block;
  ~DitModel();

 private:
  DitModel() = default;
  Status linear(const Linear& layer, const float* x, int64_t rows, float* y,
                const ExecContext& exec);
  Status self_attention(float* qkv, int64_t tokens, float* out, const ExecContext& exec);
  Status attend_context(const float* q, const float* context_kv, int64_t queries, int64_t keys,
                        float* out, const ExecContext& exec);
  Status pack(Linear& layer);
  Status pack_streamed_block(const Block& block);

  std::shared_ptr<const SafetensorsFile> file_;
  Device* device_ = nullptr;
  Logger logger_;
  DitConfig config_;
  DitLoadOptions load_options_;
  ResidencyPlan residency_;
  std::vector<std::unique_ptr<Linear>> linears_;  // owns every projection
  std::vector<Block> blocks_;
  const Linear* x_embedder_ = nullptr;
  const Linear* t_linear_1_ = nullptr;
  const Linear* t_linear_2_ = nullptr;
  const Linear* final_adaln_1_ = nullptr;
  const Linear* final_adaln_2_ = nullptr;
  const Linear* final_linear_ = nullptr;
  const float* t_norm_ = nullptr;
  DeviceFallback linear_fallback_, attention_fallback_;
  DitCounters counters_;
};

// Reads the DiT configuration from a file's __metadata__ (docs/diffusion.md's keys).
Result<DitConfig> read_dit_config(const SafetensorsFile& file);

}  // namespace npuflow::diffusion
