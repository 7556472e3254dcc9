// Builds a GraphView snapshot from an OrtGraph (front-end translation only, no decisions).
#pragma once

#include <onnxruntime_c_api.h>

#include <vector>

#include "core/status.h"
#include "graph/graph_view.h"

namespace npuflow::ort {

struct OrtGraphSnapshot {
  GraphView view;
  std::vector<const OrtNode*> ort_nodes;  // indexed by NodeId
};

Result<OrtGraphSnapshot> snapshot_graph(const OrtGraph* graph);

}  // namespace npuflow::ort
