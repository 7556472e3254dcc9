#include "ggml/ggml_fusion.h"

#include "ggml/ggml_view_ops.h"

namespace npuflow::ggml {
namespace {

bool computed(const ggml_tensor* node) {
  return (node->flags & GGML_TENSOR_FLAG_COMPUTE) != 0;
}

// A MUL_MAT whose weight is a dense 2-D leaf of whole rows: what can be stacked with others.
bool stackable(const ggml_tensor* node) {
  const ggml_tensor* w = node->src[0];
  const ggml_tensor* x = node->src[1];
  return node->op == GGML_OP_MUL_MAT && computed(node) && w != nullptr && x != nullptr &&
         w->op == GGML_OP_NONE && w->view_src == nullptr && ggml_is_contiguous(w) &&
         w->ne[2] == 1 && w->ne[3] == 1 && ggml_is_contiguous(node);
}

}  // namespace

bool stacks_with(const ggml_tensor* head, const ggml_tensor* node) {
  const ggml_tensor* a = head->src[0];
  const ggml_tensor* b = node->src[0];
  return stackable(node) && node->src[1] == head->src[1] && a->type == b->type &&
         a->ne[0] == b->ne[0] && a->nb[1] == b->nb[1];
}

std::vector<int> shared_input_group(ggml_cgraph* graph, int first) {
  const ggml_tensor* head = ggml_graph_node(graph, first);
  if (head->op != GGML_OP_MUL_MAT || !computed(head)) return {};
  std::vector<int> group{first};
  if (!stackable(head)) return group;
  for (int i = first + 1; i < ggml_graph_n_nodes(graph); ++i) {
    const ggml_tensor* node = ggml_graph_node(graph, i);
    if (stacks_with(head, node)) {
      group.push_back(i);
    } else if (!is_view_op(node->op)) {
      break;
    }
  }
  return group;
}

}  // namespace npuflow::ggml
