// Human and machine renderings of a ClaimSet: the info log lines, the `npuflow explain` table and
// the JSON lines behind the `report` knob. One source, so the three never disagree.
#pragma once

#include <string>
#include <vector>

#include "graph/claim.h"

namespace npuflow {

// "graph 'main': claimed 7 of 7 QDQ MatMul groups (28 nodes)" then one line per refusal reason.
// `what` names the candidates, e.g. "QDQ MatMul groups".
std::vector<std::string> summarize_claims(const std::string& graph_name, const ClaimSet& claims,
                                          const char* what = "QDQ MatMul groups");

// One JSON object (a single line) describing the graph's claims by one matcher ("qdq",
// "vision"), its refusals, and the GEMMs no matcher claimed (the same list on every record of a
// graph).
std::string claims_to_json(const std::string& graph_name, const GraphView& graph,
                           const ClaimSet& claims, const std::vector<GemmWork>& host_gemms,
                           const char* matcher = "qdq");

std::string json_escape(const std::string& text);

}  // namespace npuflow
