#include <map>
#include <set>

#include "core/strings.h"
#include "graph/encoder/matcher.h"
#include "graph/encoder/side_program.h"

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

std::optional<TextEmbedding> Matcher::text_embedding(NodeId gather, Fail& why) const {
  // The token embedding plus the position and token-type embeddings (Adds), then a LayerNorm:
  // its output is the stream the first block reads.
  std::vector<ValueId> frontier = {g_.node(gather).outputs[0]};
  for (int depth = 0; depth < 4 && !frontier.empty(); ++depth) {
    std::vector<ValueId> next;
    for (ValueId v : frontier) {
      std::vector<Used> lu;
      auto norms = forward_layernorms(v, {}, lu);
      if (norms.size() == 1) return TextEmbedding{v, norms[0].first, norms[0].second, lu[0]};
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

std::optional<ValueId> Matcher::text_stream(NodeId gather, Fail& why) const {
  auto text = text_embedding(gather, why);
  if (!text) return std::nullopt;
  return text->stream;
}

bool Matcher::take_in_embedding(const TextEmbedding& text, const Stack& s,
                                std::set<NodeId>& claimed, VisionEncoderClaim& enc) const {
  // The values the blocks read from outside: the embedding sum, the attention biases, rotary
  // tables computed at run time.
  std::vector<ValueId> wanted = {text.sum};
  for (const EncoderLayerRef& l : enc.layers) {
    for (const std::string* runtime : {&l.attention_bias, &l.rope_cos.runtime, &l.rope_sin.runtime})
      if (!runtime->empty()) wanted.push_back(g_.find_value(*runtime));
  }
  std::set<NodeId> inside = claimed;
  inside.insert(text.used.begin(), text.used.end());
  // Masks are sized by the stream's shape in some exports (transformers 5.x): every stream value
  // has the embedding sum's.
  std::map<ValueId, ValueId> shape_of;
  for (ValueId v : s.stream) shape_of[v] = text.sum;
  SideProgram side = build_side_program(g_, wanted, inside, shape_of);
  if (!side.computed.count(text.sum)) {
    enc.note = str_cat(
        "the token embedding (Gather, position and type embeddings, LayerNorm) runs on the "
        "CPU EP: ",
        side.why_not[text.sum]);
    return false;
  }
  // The claim again, with the embedding's LayerNorm and the program's nodes inside it.
  Embedding emb;
  emb.value = s.stream[0];
  emb.used = text.used;
  emb.used.insert(emb.used.end(), side.nodes.begin(), side.nodes.end());
  VisionEncoderClaim whole = enc;
  whole.exits.clear();
  whole.exit_norms.clear();
  Fail why;
  auto closed = close_claim(emb, s, true, whole, why);
  if (!closed) {
    enc.note = str_cat("the token embedding runs on the CPU EP: with it inside, ", why.detail);
    return false;
  }
  // The program reads its inputs from the fused node: none may be computed inside the claim
  // (shape arithmetic the closure took in, say).
  for (const std::string& input : side.program.input_names) {
    const NodeId p = producer(g_.find_value(input));
    if (p != kNoNode && closed->count(p)) {
      enc.note = str_cat("the token embedding runs on the CPU EP: the mask arithmetic reads '",
                         input, "', which the claim would compute without it");
      return false;
    }
  }
  whole.from_pixels = false;
  whole.input = g_.value(text.sum).name;
  whole.pre_norm = text.norm.ref;
  whole.program = std::move(side.program);
  std::string outside;
  for (ValueId w : wanted) {
    if (w == text.sum || side.computed.count(w)) continue;
    outside = str_cat("; '", g_.value(w).name, "' stays an input: ", side.why_not[w]);
  }
  whole.note = str_cat("the embedding and the mask arithmetic (", side.nodes.size(),
                       " nodes) run inside as an exact tensor program", outside);
  enc = std::move(whole);
  claimed = std::move(*closed);
  return true;
}

std::optional<Claim> Matcher::run_text(NodeId gather, Fail& why) {
  auto text = text_embedding(gather, why);
  if (!text) return std::nullopt;
  VisionEncoderClaim enc;
  Embedding emb;
  emb.value = text->stream;
  const ValueInfo& info = g_.value(text->stream);
  emb.tokens = info.has_shape && info.shape.size() == 3 ? info.shape[1] : -1;
  Stack s;
  if (!stack(emb.value, emb.tokens, enc, s, why)) return std::nullopt;
  if (s.pre) {  // a LayerNorm between the embedding's and the first block's: not a BERT
    why = {"block_shape", "a second LayerNorm between the text embedding and the first block"};
    return std::nullopt;
  }
  auto claimed = close_claim(emb, s, false, enc, why);
  if (!claimed) return std::nullopt;
  take_in_embedding(*text, s, *claimed, enc);
  if (!constants_fit(enc, emb.tokens, why)) return std::nullopt;
  // ModernBERT rotates q and k and gates its MLP; BERT does neither.
  bool modern = false;
  for (const EncoderLayerRef& l : enc.layers)
    modern |= l.rope_cos.present || l.glu != EncoderGlu::kNone;
  enc.family = modern ? "modernbert" : "bert";
  return encoder_claim(g_.node(gather).name, *claimed, std::move(enc));
}

}  // namespace npuflow::encoder
