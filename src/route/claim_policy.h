// Do-no-harm claiming (issue #12). Under claim=faster a claim is kept only where costs measured on
// this machine say npuflow's host device runs it no slower than the CPU EP; claim=all keeps every
// claim. The costs come from a table the bench writes (`make bench`: the encoder families and the
// QDQ layer, both EPs in one process, alternating), one file per machine signature under
// ~/.cache/npuflow. No table, or no measured shape of the claim's kind: the claim is declined,
// never guessed.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "graph/claim.h"

namespace npuflow {

enum class ClaimPolicy { kAll, kFaster };

// The `claim` knob (auto | faster | all) for a session: auto is faster when the device knob was
// auto and resolved to the host (no NPU here), else all (an explicit host or sim is a deliberate
// choice, and an NPU is what the claims are for).
ClaimPolicy resolve_claim_policy(std::string_view claim_knob, std::string_view device_knob,
                                 std::string_view device_name);
// The same knob in the ggml backend, whose peer is ggml's CPU backend: auto is faster on the host
// device, explicit or not (llama.cpp's CPU backend already runs on that host), else all (sim's
// figures and a board's are what it is for). device=auto without a board never gets this far:
// the backend stays idle.
ClaimPolicy resolve_ggml_claim_policy(std::string_view claim_knob, std::string_view device_name);
const char* claim_policy_name(ClaimPolicy policy);

// One measured model: its GEMM work in the claim's terms and each EP's median wall time.
struct MeasuredCost {
  // "vision_encoder", "quantized_encoder" (an encoder read through its quantized weights),
  // "qdq_matmul" or "integer_matmul"
  std::string kind;
  std::string model;   // what was measured, e.g. "Depth Anything V2 S"
  std::string family;  // the encoder claim's family (vit, clip, ...): preferred among equals
  int64_t tokens = 0, hidden = 0;  // encoders: sequence length and width
  int64_t rows = 0, k = 0, n = 0;  // QDQ layers: the first GEMM's shape
  double flops = 0;                // 2 x MACs of all its GEMM work, attention included
  double npuflow_ms = 0, cpu_ep_ms = 0;
  std::string form;  // quantized encoders: the quant_form measured (a row vouches for it only)
};

struct CostTable {
  std::string path;
  std::string machine;
  std::vector<MeasuredCost> rows;
};

// "x86_64-avx512-vnni", "x86_64-avx2", "aarch64", ...: machines that share one share costs.
std::string machine_signature();
// Where measured costs are kept: $NPUFLOW_CACHE_DIR or $XDG_CACHE_HOME/npuflow or
// ~/.cache/npuflow.
std::string cost_cache_dir();
// cost_cache_dir() + /claim-costs-<sig>.json.
std::string default_cost_table_path();
// Reads a table; a missing file is an error the caller reports as "not measured".
Result<CostTable> load_cost_table(const std::string& path);

struct ClaimVerdict {
  bool keep = false;
  double npuflow_ms = 0, cpu_ep_ms = 0;  // estimated for this claim (0 when nothing measured)
  std::string reason;                    // refusal key when declined
  std::string detail;
};

// The claim's costs from the nearest measured shape of its kind (encoders: token count and width,
// then the same family; QDQ and integer groups: M, K and N), scaled by its GEMM work. A quantized
// encoder is judged only by quantized encoders: a float encoder's figure says nothing of it.
ClaimVerdict judge_claim(const Claim& claim, const CostTable* table, const std::string& table_path);

// Under kFaster, moves every claim judged slower (or unmeasured) into the refusals, with both
// costs in the detail (what `npuflow explain` prints). table may be null (none could be read).
void apply_claim_policy(ClaimSet& claims, ClaimPolicy policy, const CostTable* table,
                        const std::string& table_path);

}  // namespace npuflow
