// The constant scale and zero point of a QuantizeLinear / DequantizeLinear node, as the QDQ
// matcher and the quantized-encoder view read them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "graph/graph_view.h"

namespace npuflow {

struct MatchRefusal {
  std::string reason;
  std::string detail;
};

inline bool is_8bit(ElementType type) {
  return type == ElementType::kInt8 || type == ElementType::kUInt8;
}

struct QuantParams {
  std::vector<float> scales;
  std::vector<int32_t> zero_points;
  int64_t axis = 1;
  int64_t block_size = 0;
};

// Reads the scale and zero point of `node` (a DequantizeLinear or QuantizeLinear whose integer
// side is `integer_type`, int8 or uint8). They must be constants: a scale that changes per run
// cannot be folded into anything packed once.
std::optional<MatchRefusal> read_quant_params(const GraphView& graph, const NodeInfo& node,
                                              ElementType integer_type, QuantParams& out);

}  // namespace npuflow
