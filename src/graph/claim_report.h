// Human and machine renderings of a ClaimSet: the info log lines, the `npuflow explain` table and
// the JSON lines behind the `report` knob. One source, so the three never disagree.
#pragma once

#include <string>
#include <vector>

#include "graph/claim.h"

namespace npuflow {

// "graph 'main': claimed 7 of 7 QDQ MatMul groups (28 nodes)" then one line per refusal reason.
std::vector<std::string> summarize_claims(const std::string& graph_name, const ClaimSet& claims);

// One JSON object (a single line) describing the graph's claims, refusals and the GEMMs left to
// the CPU.
std::string claims_to_json(const std::string& graph_name, const GraphView& graph,
                           const ClaimSet& claims, const std::vector<GemmWork>& host_gemms);

std::string json_escape(const std::string& text);

}  // namespace npuflow
