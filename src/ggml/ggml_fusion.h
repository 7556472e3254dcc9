// Which MUL_MATs of a graph split NPUFLOW runs as one product: consecutive ones (views between
// them allowed) that read the same activation tensor through weights of one type and width, as
// llama.cpp's attention K and V and its FFN gate and up are. Their weights, stacked, become one
// resident weight, so the activation is packed (and, on the native path, quantized) once and the
// device is called once where it was called per projection: the resident form of librocketnpu's
// multi-weight streams, whose own entry point re-packs the weights on every call.
#pragma once

#include <vector>

#include "ggml.h"

namespace npuflow::ggml {

// Whether `node` runs in one product with `head` (a stackable MUL_MAT): a MUL_MAT to compute over a
// dense 2-D leaf weight of head's type and row layout, reading head's activation tensor.
bool stacks_with(const ggml_tensor* head, const ggml_tensor* node);

// The node indices of the group that starts at node `first` of `graph`: `first` itself, then each
// later MUL_MAT that shares its activation and weight layout, up to the first node that is
// neither such a MUL_MAT nor a view. Empty when node `first` is not a MUL_MAT to compute.
std::vector<int> shared_input_group(ggml_cgraph* graph, int first);

}  // namespace npuflow::ggml
