// Test-only (knob program_ops=1): nodes that no other claim took and that the tensor-program
// interpreter implements, claimed as one fused node when they are the whole graph, else each as a
// fused node of its own, so that tests/integration/test_tensor_program.py can check the
// interpreter against the CPU EP op by op and on random graphs.
#pragma once

#include <set>
#include <vector>

#include "graph/claim.h"

namespace npuflow {

std::vector<Claim> match_program_ops(const GraphView& graph, const std::set<NodeId>& taken);

}  // namespace npuflow
