// ConvTranspose claims (issue #14 item 3): every 2-D, group-1 float ConvTranspose with a constant
// weight (and a constant bias, if any) whose attributes the device's contract admits, wherever it
// appears in a graph; a refusal with a stable key for every other ConvTranspose.
#pragma once

#include <set>

#include "graph/claim.h"
#include "graph/graph_view.h"

namespace npuflow {

// `taken`: nodes other claims hold; they are not candidates.
ClaimSet match_conv_transposes(const GraphView& graph, const std::set<NodeId>& taken);

}  // namespace npuflow
