#include "graph/quant_params.h"

#include <cmath>
#include <cstring>

#include "core/strings.h"

namespace npuflow {

std::optional<MatchRefusal> read_quant_params(const GraphView& graph, const NodeInfo& node,
                                              ElementType integer_type, QuantParams& out) {
  const ValueId scale_id = node.input(1);
  const ValueId zp_id = node.input(2);
  if (!graph.is_constant(scale_id) || (zp_id != kNoValue && !graph.is_constant(zp_id))) {
    return MatchRefusal{"quant_params_not_constant", str_cat("scale/zero point of '", node.name,
                                                             "' are not constant initializers")};
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
    if (!std::isfinite(s) || s <= 0.0f) {
      return MatchRefusal{"invalid_scale", str_cat("scale of '", node.name, "' holds ", s)};
    }
  }
  out.zero_points.assign(count, 0);
  if (zp_id != kNoValue) {
    const ValueInfo& zp = graph.value(zp_id);
    if (zp.type != integer_type || zp.constant->bytes != count) {
      return MatchRefusal{"unsupported_zero_point",
                          str_cat("zero point of '", node.name, "' is ", element_type_name(zp.type),
                                  " with ", zp.constant->bytes, " bytes for ", count, " scales")};
    }
    for (size_t i = 0; i < count; ++i) {
      out.zero_points[i] = integer_type == ElementType::kUInt8
                               ? static_cast<const uint8_t*>(zp.constant->data)[i]
                               : static_cast<const int8_t*>(zp.constant->data)[i];
    }
  }
  out.axis = node.int_attribute("axis", 1);
  out.block_size = node.int_attribute("block_size", 0);
  return std::nullopt;
}

}  // namespace npuflow
