// The encoder matcher's view of a graph after canonicalization: values are seen through Identity
// nodes and no-op Casts, and small int64 tensors computed from shapes (Shape -> Gather ->
// Unsqueeze -> Concat and the like) are evaluated, so the dynamic and the static form of one
// Reshape target read the same. The matchers ask these queries instead of walking raw producers.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "graph/encoder/index_tensor.h"
#include "graph/graph_view.h"

namespace npuflow::encoder {

using Used = std::vector<NodeId>;
// The concrete shapes values take in one replay (see replay()): a Shape of such a value
// evaluates to its replayed dims, so shape chains of dynamic exports resolve.
using ShapeEnv = std::map<ValueId, std::vector<int64_t>>;

class CanonicalGraph {
 public:
  explicit CanonicalGraph(const GraphView& graph) : g_(graph) {}
  const GraphView& graph() const { return g_; }

  NodeId producer(ValueId v) const { return v == kNoValue ? kNoNode : g_.value(v).producer; }
  // `n` is an `op` node in a domain whose ops mean what ONNX says.
  bool is(NodeId n, const char* op) const;
  NodeId producer_is(ValueId v, const char* op) const;
  // A Cast to the type its input already has.
  bool is_noop_cast(NodeId n) const;
  // The constant that `v` is, seen through Identity nodes and no-op Casts (the TorchScript
  // exporter puts Identity on deduplicated initializers); `v` itself if it is no constant.
  ValueId through_identity(ValueId v) const;
  const std::string& name(ValueId v) const { return g_.value(through_identity(v)).name; }
  bool float_constant(ValueId v) const;
  int64_t float_count(ValueId v) const;
  const float* float_data(ValueId v) const;
  // A float constant of exactly `count` elements (a 1-element one does not pass for `count`:
  // it would broadcast, and the kernels index it per element).
  bool float_vector(ValueId v, int64_t count) const {
    return float_constant(v) && float_count(v) == count;
  }

  // A float scalar: a one-element constant, or Sqrt/Reciprocal/Cast of one (the nodes join `used`).
  std::optional<float> scalar(ValueId v, Used& used) const;
  std::optional<std::vector<int64_t>> int_constant(ValueId v) const;
  std::vector<int64_t> int_list_attribute(const NodeInfo& node, const char* attr) const;
  // The value of a small int64 tensor built from shapes: constants, Shape of a value whose rank
  // is inferred (a dynamic leading batch counts as 1, other unknown dims as -1), Slice, Gather,
  // Unsqueeze, Squeeze, Cast, Concat, a 1-D Reshape of those, and TorchScript's expand(-1)
  // idiom (Where(s == -1, 1, s)).
  // With `env`, a Shape of a value in it reads the replayed dims instead.
  std::optional<std::vector<int64_t>> shape_values(ValueId v, const ShapeEnv* env = nullptr,
                                                   int depth = 0) const;
  // (value, count) of an int64 tensor all of whose `count` elements are `value`: a constant,
  // ConstantOfShape of a shape_values shape, Mul of two such.
  std::optional<std::pair<int64_t, int64_t>> filled(ValueId v, int depth = 0) const;
  // The dims of `v` (-1 where unknown), from shape inference completed through its producers
  // (Transpose, a Reshape with a computed target, elementwise ops).
  std::optional<std::vector<int64_t>> static_shape(ValueId v, int depth = 0) const;
  // The target shape of a Reshape: computed by shape_values, or the inferred output shape.
  std::optional<std::vector<int64_t>> reshape_target(const NodeInfo& reshape,
                                                     const ShapeEnv* env = nullptr) const;
  std::optional<std::vector<int64_t>> perm_of(const NodeInfo& node) const;

  // Attention masks that change nothing (constant_mask.cc): an all-zero float constant, and an
  // additive mask that is zero (that, or Where of an all-true/all-false constant condition picking
  // zeros; the Where joins `used`).
  bool zero_float_constant(ValueId v) const;
  bool zero_mask(ValueId mask, Used& used) const;

  std::vector<NodeId> non_shape_consumers(ValueId v) const;
  // Shape arithmetic (no float output), or an Identity of a constant: the plan needs neither.
  bool is_shape_node(NodeId n) const;

  // Replays `ops` on `t`; false if a shape cannot be resolved. A selector (Split output
  // `split_output`, Slice, Gather) keeps the part of the data it reads. With `env`, the shapes
  // the replay gives each value are recorded there and read back by later shape chains.
  bool replay(IndexTensor& t, const std::vector<NodeId>& ops, int split_output = 0,
              ShapeEnv* env = nullptr) const;

 protected:
  const GraphView& g_;
};

}  // namespace npuflow::encoder
