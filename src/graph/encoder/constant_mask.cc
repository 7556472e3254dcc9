// Attention masks that change nothing: exporters write an all-true boolean mask (transformers'
// eager and SDPA paths for a model without padding) as an additive Where(mask, 0, -max) and, for
// SDPA, guard fully masked rows with Where(IsNaN(P), 0, P). Both are the identity here.
#include <algorithm>

#include "graph/encoder/canonical.h"

namespace npuflow::encoder {
namespace {

// A constant boolean tensor (ONNX bool: one byte per element, no ElementType of its own):
// 1 all true, 0 all false, -1 mixed or not such a constant.
int bool_constant(const GraphView& g, ValueId v) {
  if (!g.is_constant(v)) return -1;
  const ValueInfo& info = g.value(v);
  if (info.type != ElementType::kUnknown || !info.has_shape ||
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

ValueId CanonicalGraph::through_nan_guard(ValueId probs, Used& used) const {
  const NodeId where = producer(probs);
  if (!is(where, "Where")) return probs;
  const NodeInfo& node = g_.node(where);
  const ValueId p = node.input(2);
  const NodeId isnan = producer(node.input(0));
  if (!is(isnan, "IsNaN") || g_.node(isnan).input(0) != p || !zero_float_constant(node.input(1)))
    return probs;
  std::vector<NodeId> readers = non_shape_consumers(p);
  std::sort(readers.begin(), readers.end());
  if (readers != std::vector<NodeId>{std::min(where, isnan), std::max(where, isnan)} ||
      non_shape_consumers(node.input(0)).size() != 1)
    return probs;
  used.push_back(isnan);
  used.push_back(where);
  return p;
}

}  // namespace npuflow::encoder
