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

// The integer types a QuantizeLinear / DequantizeLinear converts between floats and: 8 and 16
// bits, ONNX's packed int4 / uint4, and int32 (a bias, whose zero point ONNX fixes at 0).
bool is_quantized_type(ElementType type);

// Element `index` of an integer constant of one of those types.
int64_t integer_element(const ConstantData& data, ElementType type, size_t index);

// A QuantizeLinear / DequantizeLinear of ONNX or of ONNX Runtime's com.microsoft domain (where
// onnxruntime.quantization puts them before opset 21 for 16- and 4-bit types): the same
// arithmetic.
bool is_quantize_node(const NodeInfo& node);
bool is_dequantize_node(const NodeInfo& node);
// Whether any node quantizes or dequantizes: Q/DQ or DynamicQuantizeLinear.
bool holds_quantization(const GraphView& graph);

struct QuantParams {
  std::vector<float> scales;
  std::vector<int32_t> zero_points;
  int64_t axis = 1;
  int64_t block_size = 0;
};

// Which scales a reader accepts. kPositive: finite and > 0, what the integer epilogues and the
// activation round trips assume. kFinite: any finite value, for a constant weight dequantized
// once as ONNX Runtime computes it, (q - zero point) * scale, for which a sign changes nothing
// (MatMulNBitsQuantizer's symmetric form writes negative scales: the block's extreme over -8).
enum class ScaleRule { kPositive, kFinite };

// Reads the scale and zero point of `node` (a DequantizeLinear or QuantizeLinear whose integer
// side is `integer_type`, one of is_quantized_type's). They must be constants: a scale that
// changes per run cannot be folded into anything packed once.
std::optional<MatchRefusal> read_quant_params(const GraphView& graph, const NodeInfo& node,
                                              ElementType integer_type, QuantParams& out,
                                              ScaleRule rule = ScaleRule::kPositive);

}  // namespace npuflow
