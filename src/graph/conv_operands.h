// What the Conv and ConvTranspose matchers read alike: a float input, a finite constant 4-D weight,
// group 1, an optional finite constant bias, auto_pad NOTSET or VALID, and 2-D strides, dilations
// and pads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "graph/claim.h"
#include "graph/graph_view.h"

namespace npuflow {

struct ConvOperands {
  const ValueInfo* input = nullptr;
  const ValueInfo* weight = nullptr;
  std::string bias;                               // "" when there is none
  std::vector<int64_t> strides, dilations, pads;  // pads: top, left, bottom, right
};

// The refusal, or nullopt with `out` filled. `op` names the node's kind in details;
// `out_channel_axis` is the weight axis that holds the output channels (Conv 0, ConvTranspose 1).
std::optional<Refusal> read_conv_operands(const GraphView& graph, NodeId id, const char* op,
                                          int out_channel_axis, ConvOperands& out);

// The operands' strides, dilations and pads into a ConvSpec or a ConvTransposeSpec.
template <typename Spec>
void copy_window(const ConvOperands& operands, Spec& spec) {
  spec.stride_y = operands.strides[0];
  spec.stride_x = operands.strides[1];
  spec.dil_y = operands.dilations[0];
  spec.dil_x = operands.dilations[1];
  spec.pad_top = operands.pads[0];
  spec.pad_left = operands.pads[1];
  spec.pad_bottom = operands.pads[2];
  spec.pad_right = operands.pads[3];
}

// Makes `claim` the single-node claim of `kind` on node `id` and names its operands in `ref`.
void claim_single_convolution(const GraphView& graph, NodeId id, const ConvOperands& operands,
                              ClaimKind kind, Claim& claim, ConvolutionRef& ref);

// An INTS attribute of `count` values, `fallback` each when absent; nullopt when it has another
// length.
std::optional<std::vector<int64_t>> int_list(const NodeInfo& node, const char* name, size_t count,
                                             int64_t fallback);

}  // namespace npuflow
