// Hand-built GraphViews of transformer pieces for the encoder matcher's unit tests: constants
// with real float data owned by the graph, inferred shapes, node attributes. Each piece is built
// in its accepted form; the spec flags make the one-change near misses the tests refuse.
#pragma once

#include <cmath>
#include <cstdint>
#include <list>
#include <string>
#include <utility>
#include <vector>

#include "core/strings.h"
#include "graph/encoder/matcher.h"
#include "graph/encoder_matcher.h"

namespace npuflow::encoder_test {

using Attrs = std::vector<std::pair<std::string, Attribute>>;

inline Attribute ints(std::vector<int64_t> v) {
  Attribute a;
  a.integers = std::move(v);
  return a;
}
inline Attribute integer(int64_t v) {
  Attribute a;
  a.integer = v;
  return a;
}

// `base` with each of `extra` replacing the attribute of its name, or added.
inline Attrs with_overrides(Attrs base, const Attrs& extra) {
  for (const auto& [name, value] : extra) {
    bool replaced = false;
    for (auto& [have, old] : base) {
      if (have == name) {
        old = value;
        replaced = true;
      }
    }
    if (!replaced) base.emplace_back(name, value);
  }
  return base;
}
inline Attribute real(float v) {
  Attribute a;
  a.real = v;
  return a;
}
inline Attribute text(std::string v) {
  Attribute a;
  a.text = std::move(v);
  return a;
}

// A GraphView and the constant bytes it borrows. Not copyable: the view points into `storage`.
struct TestGraph {
  GraphView graph;
  std::list<std::vector<uint8_t>> storage;

  TestGraph() = default;
  TestGraph(const TestGraph&) = delete;
  TestGraph& operator=(const TestGraph&) = delete;

  ValueId value(std::vector<int64_t> shape, ElementType type = ElementType::kFloat32,
                std::string name = "") {
    ValueInfo info;
    info.name = name.empty() ? str_cat("v", graph.values.size()) : std::move(name);
    info.type = type;
    info.shape = std::move(shape);
    info.has_shape = true;
    return graph.add_value(std::move(info));
  }
  ValueId input(std::vector<int64_t> shape, ElementType type = ElementType::kFloat32,
                std::string name = "") {
    ValueId v = value(std::move(shape), type, std::move(name));
    graph.values[static_cast<size_t>(v)].is_graph_input = true;
    return v;
  }
  template <typename T>
  ValueId constant(std::vector<int64_t> shape, ElementType type, const std::vector<T>& data,
                   std::string name = "") {
    const bool unnamed = name.empty();
    ValueId id = value(std::move(shape), type, std::move(name));
    if (unnamed) graph.values[static_cast<size_t>(id)].name = str_cat("c", id);
    storage.emplace_back(reinterpret_cast<const uint8_t*>(data.data()),
                         reinterpret_cast<const uint8_t*>(data.data() + data.size()));
    graph.values[static_cast<size_t>(id)].constant =
        ConstantData{storage.back().data(), storage.back().size()};
    return id;
  }
  ValueId floats(std::vector<int64_t> shape, const std::vector<float>& data,
                 std::string name = "") {
    return constant<float>(std::move(shape), ElementType::kFloat32, data, std::move(name));
  }
  // A float constant of `shape` with small distinct values.
  ValueId weight(std::vector<int64_t> shape, std::string name = "") {
    std::vector<float> data(static_cast<size_t>(element_count(shape)));
    for (size_t i = 0; i < data.size(); ++i) data[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
    return floats(std::move(shape), data, std::move(name));
  }
  ValueId scalar(float v) { return floats({}, {v}); }
  ValueId i64s(const std::vector<int64_t>& data) {
    return constant<int64_t>({static_cast<int64_t>(data.size())}, ElementType::kInt64, data);
  }
  ValueId i64_scalar(int64_t v) { return constant<int64_t>({}, ElementType::kInt64, {v}); }

  NodeId node(const std::string& op, std::vector<ValueId> in, std::vector<ValueId> out,
              Attrs attrs = {}, std::string domain = "") {
    NodeInfo info;
    info.name = str_cat(op, graph.nodes.size());
    info.op_type = op;
    info.domain = std::move(domain);
    info.inputs = std::move(in);
    info.outputs = std::move(out);
    info.attributes = std::move(attrs);
    return graph.add_node(std::move(info));
  }
  // One node with one output of `shape`; returns the output.
  ValueId op(const std::string& op_type, std::vector<ValueId> in, std::vector<int64_t> shape,
             Attrs attrs = {}, ElementType type = ElementType::kFloat32, std::string domain = "") {
    ValueId out = value(std::move(shape), type);
    node(op_type, std::move(in), {out}, std::move(attrs), std::move(domain));
    return out;
  }
  void output(ValueId v) { graph.values[static_cast<size_t>(v)].is_graph_output = true; }
  void forget_shape(ValueId v) { graph.values[static_cast<size_t>(v)].has_shape = false; }
  const ValueInfo& info(ValueId v) const { return graph.value(v); }
  const std::string& name(ValueId v) const { return graph.value(v).name; }
  NodeId producer(ValueId v) const { return graph.value(v).producer; }
};

// --- Linear projections -------------------------------------------------------------------
enum class LinearForm { kMatMul, kMatMulAdd, kBiasFirst, kOrtReshapeGemm };

// `x` is [B, t, k] (B = batch); the output is [B, t, n].
inline ValueId linear(TestGraph& g, ValueId x, int64_t k, int64_t n,
                      LinearForm form = LinearForm::kMatMulAdd) {
  std::vector<int64_t> out_shape = g.info(x).shape;
  out_shape.back() = n;
  const ValueId w = g.weight({k, n});
  if (form == LinearForm::kOrtReshapeGemm) {
    const int64_t rows = leading_rows(g.info(x).shape);
    const ValueId flat = g.op("Reshape", {x, g.i64s({-1, k})}, {rows, k});
    const ValueId gemm = g.op("Gemm", {flat, w, g.weight({n})}, {rows, n});
    std::vector<int64_t> back = out_shape;
    if (back[0] < 0) back[0] = 1;
    return g.op("Reshape", {gemm, g.i64s(back)}, out_shape);
  }
  const ValueId mm = g.op("MatMul", {x, w}, out_shape);
  if (form == LinearForm::kMatMul) return mm;
  const ValueId b = g.weight({n});
  return form == LinearForm::kBiasFirst ? g.op("Add", {b, mm}, out_shape)
                                        : g.op("Add", {mm, b}, out_shape);
}

// --- LayerNorm ----------------------------------------------------------------------------
enum class NormForm { kOp, kPow, kMulSquare };

struct NormSpec {
  NormForm form = NormForm::kOp;
  bool beta = true;
  int64_t axis = -1;          // the op's axis, or the ReduceMeans' axis when decomposed
  int64_t mean_axis = -1;     // the first ReduceMean's axis (decomposed)
  float exponent = 2.0f;      // the Pow's exponent
  bool eps_identity = false;  // eps read through an Identity of its constant
  int64_t gamma_count = 0;    // 0: the hidden size
};

inline ValueId layernorm(TestGraph& g, ValueId x, const NormSpec& s = {}) {
  const std::vector<int64_t> shape = g.info(x).shape;
  const int64_t d = shape.back();
  const int64_t count = s.gamma_count > 0 ? s.gamma_count : d;
  const ValueId gamma = g.weight({count});
  const ValueId beta = s.beta ? g.weight({count}) : kNoValue;
  if (s.form == NormForm::kOp) {
    std::vector<ValueId> in = {x, gamma};
    if (s.beta) in.push_back(beta);
    return g.op("LayerNormalization", in, shape,
                {{"axis", integer(s.axis)}, {"epsilon", real(1e-6f)}});
  }
  std::vector<int64_t> reduced = shape;
  reduced.back() = 1;
  const ValueId mean = g.op("ReduceMean", {x}, reduced, {{"axes", ints({s.mean_axis})}});
  const ValueId centered = g.op("Sub", {x, mean}, shape);
  const ValueId squared = s.form == NormForm::kPow
                              ? g.op("Pow", {centered, g.scalar(s.exponent)}, shape)
                              : g.op("Mul", {centered, centered}, shape);
  const ValueId variance = g.op("ReduceMean", {squared}, reduced, {{"axes", ints({s.axis})}});
  ValueId eps = g.scalar(1e-12f);
  if (s.eps_identity) eps = g.op("Identity", {eps}, {});
  const ValueId sum = g.op("Add", {variance, eps}, reduced);
  const ValueId root = g.op("Sqrt", {sum}, reduced);
  const ValueId normed = g.op("Div", {centered, root}, shape);
  const ValueId scaled = g.op("Mul", {normed, gamma}, shape);
  return s.beta ? g.op("Add", {scaled, beta}, shape) : scaled;
}

// --- MLP activation -----------------------------------------------------------------------
enum class Act {
  kErfDiv,       // (u * 0.5) * (1 + erf(u / sqrt 2))
  kErfMulFirst,  // 0.5 * (u * (erf(u * 1/sqrt 2) + 1))
  kGeluOp,       // Gelu, approximate none
  kGeluTanhOp,   // Gelu, approximate tanh
  kFastGelu,     // com.microsoft FastGelu
  kQuickGelu,    // u * sigmoid(1.702 u)
  kTanhInsteadOfErf,
  kClip,  // Clip of an erf GELU
  kRelu,
};

inline ValueId activation(TestGraph& g, ValueId u, Act act) {
  const std::vector<int64_t> shape = g.info(u).shape;
  switch (act) {
    case Act::kErfDiv:
    case Act::kTanhInsteadOfErf:
    case Act::kClip: {
      const ValueId half = g.op("Mul", {u, g.scalar(0.5f)}, shape);
      const ValueId scaled = g.op("Div", {u, g.scalar(1.4142135f)}, shape);
      const ValueId e = g.op(act == Act::kTanhInsteadOfErf ? "Tanh" : "Erf", {scaled}, shape);
      const ValueId one_plus = g.op("Add", {e, g.scalar(1.0f)}, shape);
      const ValueId gelu = g.op("Mul", {half, one_plus}, shape);
      if (act != Act::kClip) return gelu;
      return g.op("Clip", {gelu, g.scalar(-100.0f), g.scalar(100.0f)}, shape);
    }
    case Act::kErfMulFirst: {
      const ValueId scaled = g.op("Mul", {u, g.scalar(0.70710678f)}, shape);
      const ValueId e = g.op("Erf", {scaled}, shape);
      const ValueId one_plus = g.op("Add", {g.scalar(1.0f), e}, shape);
      const ValueId prod = g.op("Mul", {u, one_plus}, shape);
      return g.op("Mul", {g.scalar(0.5f), prod}, shape);
    }
    case Act::kGeluOp:
      return g.op("Gelu", {u}, shape, {{"approximate", text("none")}});
    case Act::kGeluTanhOp:
      return g.op("Gelu", {u}, shape, {{"approximate", text("tanh")}});
    case Act::kFastGelu:
      return g.op("FastGelu", {u}, shape, {}, ElementType::kFloat32, "com.microsoft");
    case Act::kQuickGelu: {
      const ValueId scaled = g.op("Mul", {u, g.scalar(1.702f)}, shape);
      const ValueId sig = g.op("Sigmoid", {scaled}, shape);
      return g.op("Mul", {u, sig}, shape);
    }
    case Act::kRelu:
      return g.op("Relu", {u}, shape);
  }
  return kNoValue;
}

// --- Attention ----------------------------------------------------------------------------
enum class HeadSplit {
  kStaticReshape,  // Reshape [1, T, H, dh] with a constant target
  kShapeChain,     // Reshape by Concat(Shape->Gather->Unsqueeze, H, dh)
  kFusedSplit,     // one [D, 3D] projection, Split in three
  kFusedSlices,    // one [D, 3D] projection, three Slices
  kFusedReshape5,  // one [D, 3D] projection, Reshape [B,T,3,H,dh] + Transpose + Gather
};
enum class ScalePlace { kScoresMul, kScoresDiv, kQOnly, kSqrtBoth, kNone };

struct AttentionSpec {
  int64_t t = 6, d = 8, heads = 2;
  bool dynamic_batch = false;
  HeadSplit split = HeadSplit::kStaticReshape;
  ScalePlace scale = ScalePlace::kScoresMul;
  bool mask_bias = false;             // Add of a runtime [B,1,1,T] mask before the Softmax
  bool constant_mask = false;         // the same Add with a constant
  float constant_mask_value = -1.0f;  // its every element
  bool constant_mask_where = false;   // selected by a Where of an all-true boolean constant
  bool nan_guard = false;             // Where(IsNaN(P), 0, P)
  bool eval_dropout = false;          // an inference-mode Dropout and a no-op Cast on P
  int64_t softmax_axis = -1;
  // A constant head-split target other than [1, T, H, dh] (e.g. [0, 0, -1, dh] or [1, -1, H, dh]).
  std::vector<int64_t> split_target;
  LinearForm projection = LinearForm::kMatMulAdd;  // the Q/K/V and output projections' form
  // Near misses.
  bool k_untransposed = false;      // K split like Q, [B,H,T,dh]
  bool swap_fused = false;          // q reads the k block and k the q block
  bool v_reads_other = false;       // V projects another tensor
  bool merge_untransposed = false;  // the heads merged by a Reshape alone, without [0,2,1,3]
  // The heads merged by a Reshape to a target computed from Shape(merged) (a dynamic export: no
  // shape inferred past it), in order [B, T, D], or near miss swapped to [T, B, D] (the order of
  // a batch of 1 kept, the CPU EP's residual add then broadcasting to [T, T, D]).
  bool merge_by_shape_chain = false;
  bool merge_chain_swapped = false;
  bool v_split_transposed = false;    // V's head split as [1,T,dh,H] (dims swapped) then [0,3,1,2]
  std::vector<int64_t> fused_starts;  // the three Slices' first columns (empty: 0, D, 2D)
  float nan_fill = 0.0f;         // what the Where guard writes for NaN (0 is the accepted form)
  bool scale_by_tensor = false;  // the scores multiplied by a per-key constant vector
};

struct AttentionGraph {
  ValueId out = kNoValue;  // the output projection's output
  ValueId mask = kNoValue;
  float scale = 0;  // 1/sqrt(dh), the scale the graph applies
};

inline ValueId split_heads(TestGraph& g, ValueId p, const AttentionSpec& s, bool key) {
  const int64_t dh = s.d / s.heads;
  const int64_t b = g.info(p).shape[0];
  std::vector<int64_t> split_shape = {b, s.t, s.heads, dh};
  ValueId r;
  if (s.split == HeadSplit::kShapeChain) {
    const ValueId shape = g.op("Shape", {p}, {3}, {}, ElementType::kInt64);
    const ValueId batch = g.op("Gather", {shape, g.i64_scalar(0)}, {}, {}, ElementType::kInt64);
    const ValueId tokens = g.op("Gather", {shape, g.i64_scalar(1)}, {}, {}, ElementType::kInt64);
    const ValueId b1 = g.op("Unsqueeze", {batch, g.i64s({0})}, {1}, {}, ElementType::kInt64);
    const ValueId t1 = g.op("Unsqueeze", {tokens, g.i64s({0})}, {1}, {}, ElementType::kInt64);
    const ValueId target = g.op("Concat", {b1, t1, g.i64s({s.heads}), g.i64s({dh})}, {4},
                                {{"axis", integer(0)}}, ElementType::kInt64);
    r = g.op("Reshape", {p, target}, split_shape);
    g.forget_shape(r);  // a dynamic export's Reshape output has no inferred shape
  } else {
    const std::vector<int64_t> target =
        s.split_target.empty() ? std::vector<int64_t>{1, s.t, s.heads, dh} : s.split_target;
    r = g.op("Reshape", {p, g.i64s(target)}, split_shape);
  }
  if (key && !s.k_untransposed)
    return g.op("Transpose", {r}, {b, s.heads, dh, s.t}, {{"perm", ints({0, 2, 3, 1})}});
  return g.op("Transpose", {r}, {b, s.heads, s.t, dh}, {{"perm", ints({0, 2, 1, 3})}});
}

inline AttentionGraph attention(TestGraph& g, ValueId x, const AttentionSpec& s) {
  AttentionGraph out;
  const int64_t d = s.d, t = s.t, h = s.heads, dh = d / h;
  const int64_t b = g.info(x).shape[0];
  out.scale = 1.0f / std::sqrt(static_cast<float>(dh));
  ValueId qh, kh, vh;
  const bool fused = s.split == HeadSplit::kFusedSplit || s.split == HeadSplit::kFusedSlices ||
                     s.split == HeadSplit::kFusedReshape5;
  if (!fused) {
    const ValueId v_source = s.v_reads_other ? g.input({b, t, d}) : x;
    qh = split_heads(g, linear(g, x, d, d, s.projection), s, false);
    kh = split_heads(g, linear(g, x, d, d, s.projection), s, true);
    if (s.v_split_transposed) {
      const ValueId r =
          g.op("Reshape", {linear(g, v_source, d, d, s.projection), g.i64s({1, t, dh, h})},
               {b, t, dh, h});
      vh = g.op("Transpose", {r}, {b, h, t, dh}, {{"perm", ints({0, 3, 1, 2})}});
    } else {
      vh = split_heads(g, linear(g, v_source, d, d, s.projection), s, false);
    }
  } else {
    const ValueId qkv = linear(g, x, d, 3 * d, s.projection);
    const int qi = s.swap_fused ? 1 : 0, ki = s.swap_fused ? 0 : 1;
    AttentionSpec part = s;
    part.split = HeadSplit::kStaticReshape;
    if (s.split == HeadSplit::kFusedReshape5) {
      const ValueId r = g.op("Reshape", {qkv, g.i64s({1, t, 3, h, dh})}, {b, t, 3, h, dh});
      const ValueId tr =
          g.op("Transpose", {r}, {3, b, h, t, dh}, {{"perm", ints({2, 0, 3, 1, 4})}});
      auto select = [&](int i) {
        return g.op("Gather", {tr, g.i64_scalar(i)}, {b, h, t, dh}, {{"axis", integer(0)}});
      };
      // Gather in q, k, v order (the swap reorders the readers, not the nodes).
      const ValueId parts[3] = {select(0), select(1), select(2)};
      qh = parts[qi];
      kh = g.op("Transpose", {parts[ki]}, {b, h, dh, t}, {{"perm", ints({0, 1, 3, 2})}});
      vh = parts[2];
    } else {
      ValueId parts[3];
      if (s.split == HeadSplit::kFusedSplit) {
        for (ValueId& p : parts) p = g.value({b, t, d});
        g.node("Split", {qkv, g.i64s({d, d, d})}, {parts[0], parts[1], parts[2]},
               {{"axis", integer(2)}});
      } else {
        for (int i = 0; i < 3; ++i) {
          const int64_t start =
              s.fused_starts.empty() ? i * d : s.fused_starts[static_cast<size_t>(i)];
          parts[i] =
              g.op("Slice", {qkv, g.i64s({start}), g.i64s({start + d}), g.i64s({2})}, {b, t, d});
        }
      }
      qh = split_heads(g, parts[qi], part, false);
      kh = split_heads(g, parts[ki], part, true);
      vh = split_heads(g, parts[2], part, false);
    }
  }
  if (s.scale == ScalePlace::kQOnly) qh = g.op("Mul", {qh, g.scalar(out.scale)}, g.info(qh).shape);
  if (s.scale == ScalePlace::kSqrtBoth) {
    const float root = std::sqrt(out.scale);
    qh = g.op("Mul", {qh, g.scalar(root)}, g.info(qh).shape);
    kh = g.op("Mul", {g.scalar(root), kh}, g.info(kh).shape);
  }
  const std::vector<int64_t> scores_shape = {b, h, t, t};
  ValueId scores = g.op("MatMul", {qh, kh}, scores_shape);
  if (s.scale == ScalePlace::kScoresMul)
    scores = g.op("Mul", {scores, g.scalar(out.scale)}, scores_shape);
  if (s.scale == ScalePlace::kScoresDiv)
    scores = g.op("Div", {scores, g.scalar(std::sqrt(static_cast<float>(dh)))}, scores_shape);
  if (s.scale_by_tensor)
    scores = g.op("Mul", {scores, g.floats({t}, std::vector<float>(t, out.scale))}, scores_shape);
  if (s.mask_bias) {
    out.mask = g.input({b, 1, 1, t}, ElementType::kFloat32, "mask");
    scores = g.op("Add", {scores, out.mask}, scores_shape);
  }
  if (s.constant_mask) {
    ValueId mask = g.floats({1, 1, 1, t}, std::vector<float>(t, s.constant_mask_value));
    if (s.constant_mask_where) {  // Where(all-true bool constant, mask, -1e9): picks the mask
      const ValueId all_true =
          g.constant<uint8_t>({1, 1, 1, t}, ElementType::kBool, std::vector<uint8_t>(t, 1));
      mask = g.op("Where", {all_true, mask, g.scalar(-1e9f)}, {1, 1, 1, t});
    }
    scores = g.op("Add", {scores, mask}, scores_shape);
    out.mask = mask;
  }
  ValueId probs = g.op("Softmax", {scores}, scores_shape, {{"axis", integer(s.softmax_axis)}});
  if (s.nan_guard) {
    const ValueId nan = g.op("IsNaN", {probs}, scores_shape, {}, ElementType::kUInt8);
    probs = g.op("Where", {nan, g.scalar(s.nan_fill), probs}, scores_shape);
  }
  if (s.eval_dropout) {
    probs = g.op("Dropout", {probs}, scores_shape);
    probs = g.op("Cast", {probs}, scores_shape, {{"to", integer(1)}});
  }
  const ValueId ctx = g.op("MatMul", {probs, vh}, {b, h, t, dh});
  const ValueId merged = s.merge_untransposed ? ctx
                                              : g.op("Transpose", {ctx}, {b, t, h, dh},
                                                     {{"perm", ints({0, 2, 1, 3})}});
  if (!s.merge_by_shape_chain) {
    const ValueId flat = g.op("Reshape", {merged, g.i64s({1, t, d})}, {b, t, d});
    out.out = linear(g, flat, d, d, s.projection);
    return out;
  }
  g.forget_shape(ctx);
  g.forget_shape(merged);
  const ValueId shape = g.op("Shape", {merged}, {4}, {}, ElementType::kInt64);
  auto dim = [&](int64_t i) {
    const ValueId at = g.op("Gather", {shape, g.i64_scalar(i)}, {}, {}, ElementType::kInt64);
    return g.op("Unsqueeze", {at, g.i64s({0})}, {1}, {}, ElementType::kInt64);
  };
  const ValueId batch = dim(0), tokens = dim(1);
  const ValueId target = g.op(
      "Concat",
      {s.merge_chain_swapped ? tokens : batch, s.merge_chain_swapped ? batch : tokens, g.i64s({d})},
      {3}, {{"axis", integer(0)}}, ElementType::kInt64);
  const ValueId flat = g.op("Reshape", {merged, target}, {b, t, d});
  g.forget_shape(flat);
  out.out = linear(g, flat, d, d, s.projection);
  g.forget_shape(out.out);
  for (ValueId in : g.graph.node(g.producer(out.out)).inputs) g.forget_shape(in);
  return out;
}

// --- Blocks and encoders ------------------------------------------------------------------
struct BlockSpec {
  bool pre_norm = true;
  bool layer_scale = false;
  bool mlp_norm_reads_block_input = false;    // near miss: LN2 reads h instead of h + attn
  bool mlp_residual_skips_attention = false;  // near miss: the MLP is added to h, not h + attn
  Act act = Act::kErfDiv;
  AttentionSpec att;
};

// One block reading the stream `h` [B, T, D]; returns the stream after it.
inline ValueId block(TestGraph& g, ValueId h, const BlockSpec& s) {
  const std::vector<int64_t> shape = g.info(h).shape;
  const int64_t d = s.att.d;
  auto mlp = [&](ValueId in) {
    const ValueId fc1 = linear(g, in, d, 4 * d);
    const ValueId fc2 = linear(g, activation(g, fc1, s.act), 4 * d, d);
    return s.layer_scale ? g.op("Mul", {fc2, g.weight({d})}, shape) : fc2;
  };
  if (s.pre_norm) {
    ValueId o = attention(g, layernorm(g, h), s.att).out;
    if (s.layer_scale) o = g.op("Mul", {g.weight({d}), o}, shape);
    const ValueId h1 = g.op("Add", {h, o}, shape);
    const ValueId branch = mlp(layernorm(g, s.mlp_norm_reads_block_input ? h : h1));
    return g.op("Add", {s.mlp_residual_skips_attention ? h : h1, branch}, shape);
  }
  const ValueId o = attention(g, h, s.att).out;
  const ValueId mid = layernorm(g, g.op("Add", {h, o}, shape));
  const ValueId branch = mlp(mid);
  return layernorm(g, g.op("Add", {mid, branch}, shape));
}

}  // namespace npuflow::encoder_test
