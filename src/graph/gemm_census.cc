#include "graph/gemm_census.h"

#include <set>

namespace npuflow {

std::vector<GemmWork> unclaimed_gemms(const GraphView& graph, const ClaimSet& claims) {
  std::set<NodeId> claimed;
  for (const Claim& claim : claims.claims) claimed.insert(claim.nodes.begin(), claim.nodes.end());
  std::vector<GemmWork> out;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const NodeInfo& node = graph.nodes[i];
    if (claimed.count(static_cast<NodeId>(i))) continue;
    const bool matmul = node.op_type == "MatMul";
    if (!matmul && node.op_type != "Gemm") continue;
    const ValueId a_id = node.input(0), b_id = node.input(1);
    if (a_id == kNoValue || b_id == kNoValue) continue;
    const ValueInfo& a = graph.value(a_id);
    const ValueInfo& b = graph.value(b_id);
    if (!a.has_shape || !b.has_shape || a.shape.size() < 2 || b.shape.size() < 2) continue;
    GemmWork work;
    work.name = node.name;
    work.type = a.type;
    if (matmul) {
      work.rows = leading_rows(a.shape);
      work.k = a.shape.back();
      work.n = b.shape.back();
      // A batched right operand (attention's QK^T, AV) repeats the GEMM per batch entry; the
      // rows above already count every batch of A.
    } else {
      const bool trans_a = node.int_attribute("transA", 0) != 0;
      const bool trans_b = node.int_attribute("transB", 0) != 0;
      work.rows = trans_a ? a.shape[1] : a.shape[0];
      work.k = trans_a ? a.shape[0] : a.shape[1];
      work.n = trans_b ? b.shape[0] : b.shape[1];
    }
    if (work.k <= 0 || work.n <= 0) continue;
    out.push_back(work);
  }
  return out;
}

}  // namespace npuflow
