// The GEMMs a graph leaves to the CPU: every MatMul and Gemm that no claim covers, with the shape
// its inputs declare. `npuflow plan` prices them as host time.
#pragma once

#include <vector>

#include "graph/claim.h"
#include "graph/graph_view.h"

namespace npuflow {

std::vector<GemmWork> unclaimed_gemms(const GraphView& graph, const ClaimSet& claims);

}  // namespace npuflow
