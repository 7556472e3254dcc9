// A float reading of a QDQ-quantized graph, for the encoder matcher (NPUFLOW_QUANT=fp16): a
// DequantizeLinear of a constant becomes the float constant it computes (dequantized once, held
// by the view), and an activation QuantizeLinear -> DequantizeLinear pair is bypassed, its
// readers reading the pair's float input. Node and value ids stay those of the source graph;
// the seen-through nodes are left as inert nodes with no inputs or outputs, and take_along()
// adds them to a claim made on the view.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "graph/graph_view.h"

namespace npuflow {

class DequantizedView {
 public:
  // `graph` must outlive the view; nothing is copied when it holds no Q/DQ node to see through.
  explicit DequantizedView(const GraphView& graph);
  DequantizedView(const DequantizedView&) = delete;
  DequantizedView& operator=(const DequantizedView&) = delete;

  // The float reading: the source graph itself when nothing was seen through.
  const GraphView& view() const { return changed() ? view_ : source_; }
  bool changed() const { return !seen_through_.empty(); }
  // Q/DQ nodes seen through (constant DequantizeLinears and bypassed pairs).
  int64_t seen_through_count() const { return static_cast<int64_t>(seen_through_.size()); }

  // Adds to `nodes` (a claim made on view()) every seen-through Q/DQ node whose output a node
  // in it read in the source graph. Empty when that worked; else why the claim cannot stand: a
  // seen-through value another reader outside the claim needs, which the fused node would have
  // to produce.
  std::string take_along(std::set<NodeId>& nodes) const;
  // Whether `nodes` holds a DequantizeLinear of a constant seen through: a quantized weight.
  bool reads_quantized_weight(const std::set<NodeId>& nodes) const;

 private:
  void dequantize_constant(NodeId dq);
  void bypass_pair(NodeId q);
  void detach(NodeId node);

  const GraphView& source_;
  GraphView view_;
  std::set<NodeId> seen_through_;
  std::set<NodeId> dequantized_constants_;  // the DequantizeLinears among them
  // Dequantized weights; unique_ptr so that the view's borrowed pointers never move.
  std::vector<std::unique_ptr<std::vector<float>>> storage_;
};

}  // namespace npuflow
