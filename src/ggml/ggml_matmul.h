// Translates ggml MUL_MAT nodes into npuflow's float linear path: the routing question
// (supports_op) and the computation (graph_compute). ggml types end here; the math lives in
// ops/, pack/ and the devices.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/log.h"
#include "device/device.h"
#include "ggml.h"
#include "ggml/ggml-npuflow.h"
#include "ops/device_fallback.h"
#include "pack/resident_weights.h"
#include "route/matmul_route.h"
#include "route/moe_routing_profile.h"

namespace npuflow::ggml {

WeightFormat weight_format(ggml_type type);
MatmulCandidate describe_mul_mat(const ggml_tensor* node);
// A MUL_MAT_ID (MoE experts) as the per-expert product its rows run as.
MatmulCandidate describe_mul_mat_id(const ggml_tensor* node);

// Process-wide counters behind ggml_backend_npuflow_get_stats.
class Counters {
 public:
  void count_mul_mat(int64_t m, bool fallback);
  // One product that ran `nodes` MUL_MATs stacked (each also counted by count_mul_mat).
  void count_stacked_product(int64_t nodes);
  void count_weight(bool packed, bool repacked);
  // declined: the routing rules accepted it and the offload policy did not.
  void count_supports(bool yes, bool declined);
  void count_flash_attn(bool fallback);
  void count_mul_mat_id(int64_t experts, bool fallback);
  void count_supports_flash_attn(bool yes);
  void count_supports_mul_mat_id(bool yes);
  ggml_npuflow_stats snapshot() const;
  void reset();

 private:
  mutable std::mutex mutex_;
  ggml_npuflow_stats stats_{};
};
Counters& counters();
int m_bucket(int64_t m);

// How a quantized weight becomes resident (NPUFLOW_QUANT_PATH). dequant: widened to the device's
// float type, as every type always was. native: a type whose blocks map onto a device datapath
// stays quantized there (Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, MXFP4: int8 values with a scale per 32, the
// mins of Q4_1, Q4_K and Q5_K added after the group-wise int8 GEMM; Q6_K with a scale per 16 where
// the device takes such groups; ops/groupwise_linear.h); other types are dequantized still.
enum class QuantPath { kDequant, kNative };
QuantPath quant_path_from(const std::string& knob);
// Whether `type` is tried on a native datapath under `path` (the device may still refuse its
// groups: stays_quantized says what was packed).
bool runs_native(QuantPath path, ggml_type type);
// Whether a packed weight is the native path's (group-wise, still quantized): false for one that
// was dequantized, by the quant_path or because the device took no such groups.
bool stays_quantized(const PackedWeight& weight);

struct MatmulEngineOptions {
  size_t cache_bytes = 0;  // NPUFLOW_CACHE_MB in bytes; 0: no limit
  EvictionPolicy policy = EvictionPolicy::kFrequency;
  QuantPath quant_path = QuantPath::kNative;
  bool counted = true;  // false: runs stay out of the process-wide counters (the cost probe)
};

// One backend's MUL_MAT engine: its resident weights and what it ran.
class MatmulEngine {
 public:
  MatmulEngine(Device& device, const Logger& logger, const MatmulEngineOptions& options)
      : device_(device),
        logger_(logger),
        cache_(options.cache_bytes, options.policy),
        quant_path_(options.quant_path),
        counted_(options.counted) {}

  // Computes `node` (a MUL_MAT whose structure route_matmul accepts, any M) into node->data.
  Status compute(const ggml_tensor* node, const ExecContext& context);
  // Computes MUL_MATs that share their activation and weight layout (ggml_fusion.h) as one
  // product over their weights stacked in node order, resident under its own identity; each
  // node gets its columns. One node is compute().
  Status compute_stacked(const std::vector<const ggml_tensor*>& nodes, const ExecContext& context);
  // Computes a MUL_MAT_ID: each expert the ids route rows to runs its rows as one product against
  // its own resident matrix (packed on first use under the name "<tensor>#<expert>", within the
  // same cache budget as every weight).
  Status compute_id(const ggml_tensor* node, const ExecContext& context);

  // One line: what this backend ran (printed at free with NPUFLOW_PROF=1 or NPUFLOW_LOG=info).
  std::string summary() const;
  // MUL_MAT_ID's routing per expert tensor (moe_routing_profile.h); empty without MoE.
  std::vector<std::string> routing_profile() const { return routing_.lines(); }
  // One line: per weight type, its path and the bytes of the weights packed so far in the model
  // file against their resident bytes ("weights q8_0 native: file_bytes=.. resident_bytes=..
  // ratio=1.059; q4_1 dequant: ..."); empty before any weight was packed.
  std::string footprint() const;
  int64_t fallbacks() const { return fallbacks_; }

 private:
  // Consecutive rows of a weight: `rows` ggml rows from `data`.
  struct WeightRows {
    const uint8_t* data;
    int64_t rows;
  };
  // One resident product y = x W^T: W's n rows of k elements (ggml rows of `type`, row_bytes
  // apart, the parts' rows in order, identified in the cache by `identity`), x m rows of k
  // floats, y m rows of n floats.
  struct ResidentProduct {
    std::vector<WeightRows> parts;
    const void* identity;
    size_t row_bytes;
    ggml_type type;
    int64_t k, n;
    WeightFingerprint fingerprint;
    const float* x;
    int64_t m;
    float* y;
    std::string what;                 // names the product in the fallback's warning
    const char* expert_of = nullptr;  // a MoE expert of this tensor: counted in routing_
  };
  // Packs on first use and runs on the device; the host reference on a refusal or failure
  // (fallback set, counted, said once).
  Status product(const ResidentProduct& p, const ExecContext& context, bool& fallback);

  Device& device_;
  const Logger& logger_;
  // Records a pack of `p` taking `resident` bytes (the latest pack per weight counts).
  void record_footprint(const ResidentProduct& p, const PackedWeight& weight);

  ResidentWeightCache cache_;
  RoutingProfile routing_;
  const QuantPath quant_path_;
  const bool counted_;
  struct Footprint {
    ggml_type type;
    size_t file_bytes, resident_bytes;
    bool native;  // kept quantized (a group-wise weight), not dequantized
  };
  mutable std::mutex footprint_mutex_;
  std::map<const void*, Footprint> footprint_;
  std::map<int64_t, int64_t> m_histogram_;
  int64_t mul_mats_ = 0;
  int64_t mul_mat_ids_ = 0;
  int64_t stacked_products_ = 0;  // products that ran several MUL_MATs
  int64_t stacked_mul_mats_ = 0;  // the MUL_MATs they ran
  std::vector<float> stacked_output_;
  std::atomic<int64_t> fallbacks_{0};
  DeviceFallback fallback_;
};

}  // namespace npuflow::ggml
