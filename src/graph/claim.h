// Claims are data (DESIGN.md principle 2): a matcher returns what it would run as one fused node,
// with every parameter the kernel needs, or a refusal with a stable reason key and a detail.
#pragma once

#include <string>
#include <vector>

#include "graph/graph_view.h"
#include "quant/qdq_epilogue.h"

namespace npuflow {

enum class ClaimKind { kQdqMatMul };

// One GEMM a claim (or the CPU EP, for what is not claimed) will run per inference: what
// `npuflow plan` prices. rows is -1 when it depends on a symbolic dimension.
struct GemmWork {
  std::string name;
  int64_t rows = -1;
  int64_t k = 0;
  int64_t n = 0;
  ElementType type = ElementType::kFloat32;  // the operand type the device would see
};

const char* claim_kind_name(ClaimKind kind);

struct QdqMatMulClaim {
  std::string matmul_output;  // identifies the group again at compile time
  std::string weight_name;    // constant row-major K x N initializer
  ElementType weight_type = ElementType::kInt8;
  std::string activation_name;                       // the fused node's activation input
  ElementType activation_type = ElementType::kInt8;  // the quantized activation type
  bool activation_dequantized = false;  // a shared DequantizeLinear stays outside: input is float
  std::string output_name;
  QdqGemmSpec spec;
};

struct Claim {
  ClaimKind kind = ClaimKind::kQdqMatMul;
  std::vector<NodeId> nodes;
  std::string anchor_name;  // the main node's name, for logs
  std::vector<GemmWork> work;
  QdqMatMulClaim qdq;
};

struct Refusal {
  NodeId node = kNoNode;
  std::string node_name;
  std::string reason;  // stable key, e.g. "scale_along_k"
  std::string detail;
};

struct ClaimSet {
  int candidates = 0;  // nodes a matcher looked at seriously (e.g. MatMuls fed by a weight DQ)
  std::vector<Claim> claims;
  std::vector<Refusal> refusals;
};

}  // namespace npuflow
