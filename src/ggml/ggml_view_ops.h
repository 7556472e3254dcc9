// The ops that compute nothing: a node of one of them shares its source's data (or has none), so
// NPUFLOW takes it beside the products it claims and runs nothing for it.
#pragma once

#include "ggml.h"

namespace npuflow::ggml {

inline bool is_view_op(ggml_op op) {
  switch (op) {
    case GGML_OP_NONE:
    case GGML_OP_RESHAPE:
    case GGML_OP_VIEW:
    case GGML_OP_PERMUTE:
    case GGML_OP_TRANSPOSE:
      return true;
    default:
      return false;
  }
}

}  // namespace npuflow::ggml
