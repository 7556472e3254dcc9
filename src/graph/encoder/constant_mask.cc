// Attention masks that change nothing: exporters write an all-true boolean mask (transformers'
// eager and SDPA paths for a model without padding) as an additive Where(mask, 0, -max), which ORT
// folds into an all-zero constant at ENABLE_BASIC and above.
#include <algorithm>

#include "graph/encoder/canonical.h"

namespace npuflow::encoder {
namespace {

// A constant boolean tensor (ONNX bool: one byte per element):
// 1 all true, 0 all false, -1 mixed or not such a constant.
int bool_constant(const GraphView& g, ValueId v) {
  if (!g.is_constant(v)) return -1;
  const ValueInfo& info = g.value(v);
  if (info.type != ElementType::kBool || !info.has_shape ||
      static_cast<int64_t>(info.constant->bytes) != element_count(info.shape) ||
      info.constant->bytes == 0)
    return -1;
  const auto* p = static_cast<const uint8_t*>(info.constant->data);
  const bool all_true = std::all_of(p, p + info.constant->bytes, [](uint8_t b) { return b != 0; });
  const bool all_false = std::all_of(p, p + info.constant->bytes, [](uint8_t b) { return b == 0; });
  return all_true ? 1 : all_false ? 0 : -1;
}

}  // namespace

bool CanonicalGraph::zero_float_constant(ValueId v) const {
  if (!float_constant(v)) return false;
  const float* data = float_data(v);
  return std::all_of(data, data + float_count(v), [](float x) { return x == 0.0f; });
}

bool CanonicalGraph::zero_mask(ValueId mask, Used& used) const {
  if (zero_float_constant(mask)) return true;
  const NodeId p = producer(mask);
  // One mask may serve every layer: the Where joins each claim that reads it.
  if (!is(p, "Where")) return false;
  const NodeInfo& where = g_.node(p);
  const int condition = bool_constant(g_, through_identity(where.input(0)));
  // All true picks X everywhere, all false Y.
  if (condition < 0 || !zero_float_constant(where.input(condition == 1 ? 1 : 2))) return false;
  used.push_back(p);
  return true;
}

}  // namespace npuflow::encoder
