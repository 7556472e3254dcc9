#include "graph/conv_matcher.h"

#include <optional>

#include "core/strings.h"
#include "graph/conv_operands.h"
#include "graph/single_node_claims.h"

namespace npuflow {
namespace {

// The refusal, or nullopt with `claim` filled.
std::optional<Refusal> match_one(const GraphView& graph, NodeId id, Claim& claim) {
  const NodeInfo& node = graph.node(id);
  ConvOperands operands;
  if (auto refused = read_conv_operands(graph, id, "convolution", 0, operands)) return refused;
  const ValueInfo& x = *operands.input;
  const ValueInfo& w = *operands.weight;
  ConvSpec spec;
  spec.oc = w.shape[0];
  spec.ic = w.shape[1];
  spec.kh = w.shape[2];
  spec.kw = w.shape[3];
  copy_window(operands, spec);
  if (const Status valid = check_conv_spec(spec); !valid.is_ok()) {
    return refuse_node(id, node, "attributes", valid.message());
  }
  claim_single_convolution(graph, id, operands, ClaimKind::kConv, claim, claim.conv);
  claim.conv.spec = spec;
  // Priced as the device runs it (ops/conv2d.h): one GEMM over the output's pixels, IC KH KW
  // taps each, against OC filters padded to the device's group.
  const bool known =
      x.has_shape && x.shape.size() == 4 && x.shape[0] > 0 && x.shape[2] > 0 && x.shape[3] > 0;
  const int64_t rows = known ? x.shape[0] *
                                   conv_extent(x.shape[2], spec.stride_y, spec.kh, spec.dil_y,
                                               spec.pad_top, spec.pad_bottom) *
                                   conv_extent(x.shape[3], spec.stride_x, spec.kw, spec.dil_x,
                                               spec.pad_left, spec.pad_right)
                             : -1;
  claim.work.push_back({node.name, rows, spec.ic * spec.kh * spec.kw, conv_device_channels(spec.oc),
                        ElementType::kFloat16});
  return std::nullopt;
}

}  // namespace

ClaimSet match_convs(const GraphView& graph, const std::set<NodeId>& taken) {
  return match_single_nodes(graph, taken, "Conv", match_one);
}

}  // namespace npuflow
