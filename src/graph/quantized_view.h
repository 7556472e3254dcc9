// A float reading of a quantized graph, for the encoder matcher: a DequantizeLinear of a
// constant becomes the float constant it computes (dequantized once, held by the view), an
// activation QuantizeLinear -> DequantizeLinear pair is bypassed, its readers reading the pair's
// float input, a DequantizeLinear of a Gather from a constant table becomes the Gather of the
// dequantized table, and a dynamic int8 linear (DynamicQuantizeLinear -> MatMulInteger -> Cast ->
// Mul, graph/integer_matmul_matcher.h) reads as a float MatMul of its dequantized weight, the
// integer weight kept for the kernel that runs it natively (dynamic_weight). Node and value ids
// stay those of the source graph; the seen-through nodes are left as inert nodes with no inputs or
// outputs, and take_along() adds them to a claim made on the view.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "graph/graph_view.h"

namespace npuflow {

// What the float reading sees through.
enum class QuantizedReading {
  kAll,          // Q/DQ (weights and activation pairs) and dynamic int8 linears
  kDynamicOnly,  // dynamic int8 linears only (NPUFLOW_QUANT=w8a8 keeps QDQ groups native)
};

// The integer weight of a dynamic int8 linear read as a float MatMul, borrowed from the graph.
struct DynamicInt8Weight {
  ElementType type = ElementType::kInt8;  // int8 or uint8
  const void* data = nullptr;             // row-major K x N
  int64_t k = 0, n = 0;
  std::vector<int32_t> zero_points;  // 1 or n
  std::vector<float> scales;         // 1 or n
};

class DequantizedView {
 public:
  // `graph` must outlive the view; nothing is copied when it holds no Q/DQ node to see through.
  explicit DequantizedView(const GraphView& graph,
                           QuantizedReading reading = QuantizedReading::kAll);
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
  // Whether `nodes` holds a DequantizeLinear of a constant seen through or a dynamic int8
  // linear: a quantized weight.
  bool reads_quantized_weight(const std::set<NodeId>& nodes) const;
  // The integer weight behind the float constant `weight_name` of a dynamic int8 linear, or null.
  const DynamicInt8Weight* dynamic_weight(const std::string& weight_name) const;

 private:
  void dequantize_constant(NodeId dq);
  void bypass_pair(NodeId q);
  void dequantize_gathered_table(NodeId dq);
  void fold_dynamic_linears(NodeId quantize);
  void detach(NodeId node);

  const GraphView& source_;
  GraphView view_;
  std::set<NodeId> seen_through_;
  std::set<NodeId> dequantized_constants_;  // the DequantizeLinears among them
  std::set<NodeId> dynamic_linears_;        // MatMulIntegers read as float MatMuls
  std::map<std::string, DynamicInt8Weight> dynamic_weights_;  // by weight name
  // Dequantized weights; unique_ptr so that the view's borrowed pointers never move.
  std::vector<std::unique_ptr<std::vector<float>>> storage_;
};

}  // namespace npuflow
