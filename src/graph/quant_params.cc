#include "graph/quant_params.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/strings.h"

namespace npuflow {
namespace {

bool is_quant_domain(const NodeInfo& node) {
  return is_standard_domain(node) || node.domain == "com.microsoft";
}

}  // namespace

bool is_quantized_type(ElementType type) {
  switch (type) {
    case ElementType::kInt8:
    case ElementType::kUInt8:
    case ElementType::kInt16:
    case ElementType::kUInt16:
    case ElementType::kInt32:
    case ElementType::kPackedInt4:
    case ElementType::kPackedUInt4:
      return true;
    default:
      return false;
  }
}

int64_t integer_element(const ConstantData& data, ElementType type, size_t index) {
  const auto* bytes = static_cast<const uint8_t*>(data.data);
  switch (type) {
    case ElementType::kInt8:
      return static_cast<const int8_t*>(data.data)[index];
    case ElementType::kUInt8:
      return bytes[index];
    case ElementType::kInt16:
      return static_cast<const int16_t*>(data.data)[index];
    case ElementType::kUInt16:
      return static_cast<const uint16_t*>(data.data)[index];
    case ElementType::kInt32:
      return static_cast<const int32_t*>(data.data)[index];
    case ElementType::kPackedUInt4:
    case ElementType::kPackedInt4: {
      const int nibble = (bytes[index / 2] >> ((index % 2) * 4)) & 0xF;
      return type == ElementType::kPackedInt4 && nibble >= 8 ? nibble - 16 : nibble;
    }
    default:
      return 0;
  }
}

bool is_quantize_node(const NodeInfo& node) {
  return node.op_type == "QuantizeLinear" && is_quant_domain(node);
}

bool is_dequantize_node(const NodeInfo& node) {
  return node.op_type == "DequantizeLinear" && is_quant_domain(node);
}

bool holds_quantization(const GraphView& graph) {
  return std::any_of(graph.nodes.begin(), graph.nodes.end(), [](const NodeInfo& node) {
    return is_quantize_node(node) || is_dequantize_node(node) ||
           (node.op_type == "DynamicQuantizeLinear" && is_onnx_domain(node.domain));
  });
}

std::optional<MatchRefusal> read_quant_params(const GraphView& graph, const NodeInfo& node,
                                              ElementType integer_type, QuantParams& out,
                                              ScaleRule rule) {
  const ValueId scale_id = node.input(1);
  const ValueId zp_id = node.input(2);
  if (!graph.is_constant(scale_id) || (zp_id != kNoValue && !graph.is_constant(zp_id))) {
    return MatchRefusal{"quant_params_not_constant", str_cat("scale/zero point of '", node.name,
                                                             "' are not constant initializers")};
  }
  if (!is_quantized_type(integer_type)) {
    return MatchRefusal{"unsupported_type", str_cat("'", node.name, "' quantizes to ",
                                                    element_type_name(integer_type))};
  }
  const ValueInfo& scale = graph.value(scale_id);
  if (scale.type != ElementType::kFloat32) {
    return MatchRefusal{"unsupported_scale_type",
                        str_cat("scale of '", node.name, "' is ", element_type_name(scale.type))};
  }
  const size_t count = scale.constant->bytes / sizeof(float);
  if (count == 0) {
    // A malformed model the CPU EP rejects with its own error; nothing here may index it.
    return MatchRefusal{"empty_quant_params",
                        str_cat("scale of '", node.name, "' has no elements")};
  }
  out.scales.resize(count);
  std::memcpy(out.scales.data(), scale.constant->data, count * sizeof(float));
  for (float s : out.scales) {
    if (!std::isfinite(s) || (rule == ScaleRule::kPositive && s <= 0.0f)) {
      return MatchRefusal{"invalid_scale", str_cat("scale of '", node.name, "' holds ", s)};
    }
  }
  out.zero_points.assign(count, 0);
  if (zp_id != kNoValue) {
    const ValueInfo& zp = graph.value(zp_id);
    const auto elements = static_cast<int64_t>(count);
    if (zp.type != integer_type || zp.constant->bytes != storage_bytes(zp.type, elements)) {
      return MatchRefusal{"unsupported_zero_point",
                          str_cat("zero point of '", node.name, "' is ", element_type_name(zp.type),
                                  " with ", zp.constant->bytes, " bytes for ", count, " scales")};
    }
    for (size_t i = 0; i < count; ++i) {
      const int64_t z = integer_element(*zp.constant, zp.type, i);
      // ONNX defines an int32 (bias) zero point as 0; any other is a model the CPU EP judges.
      if (integer_type == ElementType::kInt32 && z != 0) {
        return MatchRefusal{"unsupported_zero_point",
                            str_cat("int32 zero point of '", node.name, "' is not 0")};
      }
      out.zero_points[i] = static_cast<int32_t>(z);
    }
  }
  out.axis = node.int_attribute("axis", 1);
  out.block_size = node.int_attribute("block_size", 0);
  return std::nullopt;
}

}  // namespace npuflow
