// Conv claims (issue #14: SAM's neck, RF-DETR's projector, where the device has conv): every 2-D,
// group-1 float Conv with a constant weight (and a constant bias, if any) that no other claim
// holds, wherever it appears in a graph; a refusal with a stable key for every other Conv.
#pragma once

#include <set>

#include "graph/claim.h"
#include "graph/graph_view.h"

namespace npuflow {

// `taken`: nodes other claims hold; they are not candidates.
ClaimSet match_convs(const GraphView& graph, const std::set<NodeId>& taken);

}  // namespace npuflow
