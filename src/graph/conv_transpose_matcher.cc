#include "graph/conv_transpose_matcher.h"

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
  if (auto refused = read_conv_operands(graph, id, "transposed convolution", 1, operands)) {
    return refused;
  }
  const ValueInfo& x = *operands.input;
  const ValueInfo& w = *operands.weight;
  ConvTransposeSpec spec;
  spec.ic = w.shape[0];
  spec.oc = w.shape[1];
  spec.kh = w.shape[2];
  spec.kw = w.shape[3];
  if (node.attribute("output_shape") != nullptr) {
    return refuse_node(id, node, "output_shape",
                       "an explicit output_shape (pads derived at run time)");
  }
  const auto output_padding = int_list(node, "output_padding", 2, 0);
  if (!output_padding) {
    return refuse_node(id, node, "attributes",
                       "output_padding of a length other than a 2-D convolution's");
  }
  copy_window(operands, spec);
  spec.opad_y = (*output_padding)[0];
  spec.opad_x = (*output_padding)[1];
  if (const Status valid = check_conv_transpose_spec(spec); !valid.is_ok()) {
    return refuse_node(id, node, "attributes", valid.message());
  }
  if (std::string why = conv_transpose_contract_refusal(spec); !why.empty()) {
    return refuse_node(id, node, "device_contract", std::move(why));
  }
  claim_single_convolution(graph, id, operands, ClaimKind::kConvTranspose, claim,
                           claim.conv_transpose);
  claim.conv_transpose.spec = spec;
  // Priced as an NPU runs it (ops/conv_transpose.h): the GEMM over the input's pixels, whose
  // columns the host scatters, or (stride 1) one convolution GEMM over the output's pixels.
  const bool known =
      x.has_shape && x.shape.size() == 4 && x.shape[0] > 0 && x.shape[2] > 0 && x.shape[3] > 0;
  const int64_t taps = spec.kh * spec.kw;
  if (conv_transpose_runs_as_gemm(spec)) {
    claim.work.push_back({node.name, known ? x.shape[0] * x.shape[2] * x.shape[3] : -1, spec.ic,
                          spec.oc * taps, ElementType::kFloat16});
  } else {
    const int64_t rows =
        known ? x.shape[0] *
                    conv_transpose_extent(x.shape[2], spec.stride_y, spec.kh, spec.dil_y,
                                          spec.pad_top, spec.pad_bottom, spec.opad_y) *
                    conv_transpose_extent(x.shape[3], spec.stride_x, spec.kw, spec.dil_x,
                                          spec.pad_left, spec.pad_right, spec.opad_x)
              : -1;
    claim.work.push_back({node.name, rows, spec.ic * taps, spec.oc, ElementType::kFloat16});
  }
  return std::nullopt;
}

}  // namespace

ClaimSet match_conv_transposes(const GraphView& graph, const std::set<NodeId>& taken) {
  return match_single_nodes(graph, taken, "ConvTranspose", match_one);
}

}  // namespace npuflow
