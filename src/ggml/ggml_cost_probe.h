// Measures what one MUL_MAT shape costs on ggml's own CPU backend (the one the host program
// loaded, found through ggml's registry) and on NPUFLOW, on the same random tensors, in
// alternating rounds; and names the machine and builds such a measurement belongs to. This is
// how claim=faster learns its cost table (route/matmul_costs.h) the first time a shape is offered.
#pragma once

#include <functional>
#include <string>

#include "core/status.h"
#include "ggml.h"
#include "route/matmul_costs.h"

namespace npuflow::ggml {

struct ProbeShape {
  ggml_type type = GGML_TYPE_F32;
  int64_t k = 0, n = 0, m = 0;
  int threads = 1;  // the CPU backend's threads, and NPUFLOW's loops
};

// Computes one MUL_MAT node on NPUFLOW (its weight is packed on the first call and resident
// after).
using NpuflowRun = std::function<Status(const ggml_tensor* node)>;

// Weights wider than this are measured on their first kProbeMaxColumns output columns (the
// lm_head of a 49152-token vocabulary would take seconds per call) and the costs scaled by N.
inline constexpr int64_t kProbeMaxColumns = 4096;

// Copies of the weight the probe cycles through, so that no timed call finds its weight in cache
// (as in a model, where each weight is read once per ubatch): enough for their fp32 form to
// exceed 64 MiB, at most 16.
inline constexpr int64_t kProbeColdBytes = int64_t{64} << 20;
inline constexpr int64_t kProbeMaxCopies = 16;

// One warm-up call per copy on each side (NPUFLOW's packs the weight, which is paid once per weight
// and not part of a call's cost), then alternating timed rounds: at least 3, more while under a
// quarter of a second, at most 9; each side's cost is the least of its rounds. Fails when no CPU
// backend is registered or a run fails.
Result<MatmulCost> measure_mul_mat(const ProbeShape& shape, const NpuflowRun& npuflow);

// What a cost table must say it was measured on to be used here: the cost method's version, this
// machine (ISA signature, CPU model, core count), ggml's version, the CPU backend's features and
// build, and libggml-npuflow.so's build and device. Any change means measuring again.
std::string cost_identity(const std::string& npuflow_device_description);

}  // namespace npuflow::ggml
