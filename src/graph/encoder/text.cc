#include "core/strings.h"
#include "graph/encoder/matcher.h"

namespace npuflow::encoder {

bool is_token_embedding(const GraphView& g, NodeId n) {
  const NodeInfo& node = g.node(n);
  if (node.op_type != "Gather" || !is_standard_domain(node) || node.outputs.empty()) return false;
  if (node.int_attribute("axis", 0) != 0) return false;
  const ValueId table = node.input(0), ids = node.input(1);
  if (!g.is_constant(table) || g.value(table).type != ElementType::kFloat32 ||
      g.value(table).shape.size() != 2)
    return false;
  const ValueInfo& index = g.value(ids);
  return index.is_graph_input &&
         (index.type == ElementType::kInt64 || index.type == ElementType::kInt32);
}

std::optional<ValueId> Matcher::text_stream(NodeId gather, Fail& why) const {
  // The token embedding plus the position and token-type embeddings (Adds), then a LayerNorm:
  // its output is the stream the first block reads.
  std::vector<ValueId> frontier = {g_.node(gather).outputs[0]};
  for (int depth = 0; depth < 4 && !frontier.empty(); ++depth) {
    std::vector<ValueId> next;
    for (ValueId v : frontier) {
      std::vector<Used> lu;
      auto norms = forward_layernorms(v, {}, lu);
      if (norms.size() == 1) return norms[0].first;
      for (NodeId c : non_shape_consumers(v))
        if (is(c, "Add")) next.push_back(g_.node(c).outputs[0]);
    }
    frontier = std::move(next);
  }
  why = {"text_embedding",
         str_cat("no LayerNorm of the token embedding '", name(g_.node(gather).outputs[0]),
                 "' (plus position/type embeddings) starts a stream")};
  return std::nullopt;
}

std::optional<Claim> Matcher::run_text(NodeId gather, Fail& why) {
  auto stream = text_stream(gather, why);
  if (!stream) return std::nullopt;
  VisionEncoderClaim enc;
  Embedding emb;
  emb.value = *stream;
  const ValueInfo& info = g_.value(*stream);
  emb.tokens = info.has_shape && info.shape.size() == 3 ? info.shape[1] : -1;
  Stack s;
  if (!stack(emb.value, emb.tokens, enc, s, why)) return std::nullopt;
  if (s.pre) {  // a LayerNorm between the embedding's and the first block's: not a BERT
    why = {"block_shape", "a second LayerNorm between the text embedding and the first block"};
    return std::nullopt;
  }
  auto claimed = close_claim(emb, s, false, enc, why);
  if (!claimed || !constants_fit(enc, emb.tokens, why)) return std::nullopt;
  // ModernBERT rotates q and k and gates its MLP; BERT does neither.
  bool modern = false;
  for (const EncoderLayerRef& l : enc.layers)
    modern |= l.rope_cos.present || l.glu != EncoderGlu::kNone;
  enc.family = modern ? "modernbert" : "bert";
  enc.note =
      "the token embedding (Gather, position and type embeddings, LayerNorm) runs on the "
      "CPU EP";
  return encoder_claim(g_.node(gather).name, *claimed, std::move(enc));
}

}  // namespace npuflow::encoder
