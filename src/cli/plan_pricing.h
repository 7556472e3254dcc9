// `npuflow plan`'s arithmetic: one inference of a model priced on an RK3588 board, whole graph and
// by phase, with npuflow and with the ONNX Runtime CPU EP alone (the baseline the boards'
// figures are measured against).
//
// - A claimed subgraph is priced as the EP runs it: its projections on the NPU model
//   (sim/cost_model.h) with their fp32<->fp16 conversion on the host, its attention, norms,
//   activations and softmax on npuflow's host model (sim/board_cpu_model.h), and an integer GEMM
//   under min_rows rows on the host (route/matmul_route.h decides, as in the kernels).
// - Every kernel ONNX Runtime ran on its CPU EP, in a profiled run of the same session, is priced
//   by the board's CPU EP model; so is every kernel of a profiled CPU-EP-only session, which is
//   the baseline.
// Without profiles (a report alone, as the fuzz targets feed it), the baseline is the claims'
// own work on the CPU EP model and the GEMMs the report lists as left to the CPU.
#pragma once

#include <array>
#include <map>
#include <string>
#include <vector>

#include "cli/ort_profile.h"
#include "core/json.h"
#include "sim/board_cpu_model.h"
#include "sim/cost_model.h"

namespace npuflow::cli {

enum class Phase { kProjections, kAttention, kNormsActivations, kConversions, kCpuEpNodes, kOther };
inline constexpr int kPhaseCount = 6;
const char* phase_name(Phase phase);

struct PhaseSplit {
  std::array<double, kPhaseCount> ms{};
  void add(Phase phase, double value) { ms[static_cast<size_t>(phase)] += value; }
  double operator[](Phase phase) const { return ms[static_cast<size_t>(phase)]; }
  double total() const;
};

// One claimed subgraph (or one GEMM the report leaves to the CPU), summed.
struct PricedClaim {
  std::string subgraph;
  std::string kind;
  int64_t m = 0, k = 0, n = 0;  // of the single GEMM; 0 when the subgraph has several
  int gemms = 0;
  int host_gemms = 0;  // of them, run on the host (attention; integer GEMMs under min_rows)
  int64_t macs = 0;
  sim::NpuType type = sim::NpuType::kFp16;
  double npu_ms = 0;  // simulated device + packing/readback
  PhaseSplit board;   // everything the claim costs on the board with npuflow, npu_ms included
  PhaseSplit cpu_ep;  // the same work on the board's CPU EP
  int64_t resident_bytes = 0;
};

struct PlanInputs {
  int64_t rows = 128;  // for symbolic dimensions
  int workers = 5;
  int64_t min_rows = 16;  // the min_rows knob the session resolved
  // Price encoder attention on the NPU (per head, both operands packed per call), as the seeds'
  // stack runs it, instead of on the host as npuflow runs it today.
  bool attention_on_npu = false;
};

struct BoardPlan {
  std::vector<PricedClaim> claimed;
  std::vector<PricedClaim> host_gemms;  // the report's GEMMs left to the CPU (no profile)
  PhaseSplit with_npuflow;
  PhaseSplit baseline;
  bool whole_graph = false;  // priced from profiles
  int claims = 0;            // claims in the report
  int npuflow_kernels = 0;   // npuflow kernels the EP session's profile ran
  int cpu_kernels_with_npuflow = 0;
  int cpu_kernels_baseline = 0;
  int64_t resident_bytes = 0, device_macs = 0, host_macs = 0;
  double npu_ms = 0;
  double speedup() const;
};

constexpr int64_t kMaxGemmDim = int64_t{1} << 20;

// Claims and the report's host GEMMs. `with_npuflow` (a profiled run of the EP's session, may be
// null) binds the token count of an encoder claim whose graph leaves it symbolic.
BoardPlan price_report(const std::vector<JsonValue>& graphs, const PlanInputs& inputs,
                       const std::vector<ProfiledNode>* with_npuflow = nullptr);

// The whole graph: `cpu_only` is a profiled run without the EP (the baseline), `with_npuflow` one
// with it (its CPU EP kernels are what npuflow leaves to ONNX Runtime).
// Multiply-adds per input element of each ConvTranspose a claim names (OC x KH x KW), by node name:
// ONNX Runtime's CPU kernel prepacks its filter, so its profile event lists no weight to read it
// from.
using TransposeWeights = std::map<std::string, double>;
TransposeWeights transpose_weights(const std::vector<JsonValue>& graphs);

void price_profiles(BoardPlan& plan, const std::vector<ProfiledNode>& cpu_only,
                    const std::vector<ProfiledNode>& with_npuflow,
                    const TransposeWeights& transposes = {});

// One kernel ONNX Runtime's CPU EP ran: its phase and its work.
struct KernelCost {
  Phase phase = Phase::kOther;
  sim::CpuWork work;
};
KernelCost cpu_kernel_cost(const ProfiledNode& node, const TransposeWeights* transposes = nullptr);

bool is_npuflow_kernel(const ProfiledNode& node);

// How the baseline is defined, for the report.
std::string baseline_definition();

}  // namespace npuflow::cli
