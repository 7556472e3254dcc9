#include <algorithm>
#include <set>

#include "core/strings.h"
#include "graph/encoder/matcher.h"

namespace npuflow {

namespace encoder {

std::optional<Claim> Matcher::run(NodeId conv_id, Fail& why, bool from_pixels) {
  VisionEncoderClaim enc;
  Embedding emb;
  if (!embedding(conv_id, enc, emb, why)) return std::nullopt;
  Stack s;
  bool windowed = false;
  if (!stack(emb.value, emb.tokens, enc, s, why)) {
    // A windowed encoder partitions its embedded tokens into windows before the first block:
    // the claim starts at the blocks' stream, the partition stays on the CPU EP.
    for (const auto& [start, tokens] : partitioned_streams(emb.value)) {
      Fail ignored;
      if (!stack(start, tokens, enc, s, ignored)) continue;
      windowed = true;
      from_pixels = false;
      emb.tokens = tokens;
      break;
    }
    if (!windowed) return std::nullopt;
  }
  auto claimed = close_claim(emb, s, from_pixels, enc, why);
  if (!claimed || !constants_fit(enc, emb.tokens, why)) return std::nullopt;
  if (windowed) {
    enc.note = str_cat("the embedding and its partition into ", emb.tokens,
                       "-token windows run on the CPU EP; the claim starts at the windows");
  }
  enc.family = encoder_family(enc);
  return encoder_claim(g_.node(conv_id).name, *claimed, std::move(enc));
}

Claim encoder_claim(const std::string& anchor, const std::set<NodeId>& nodes,
                    VisionEncoderClaim enc) {
  Claim claim;
  claim.kind = ClaimKind::kVisionEncoder;
  claim.anchor_name = anchor;
  claim.nodes.assign(nodes.begin(), nodes.end());
  claim.encoder = std::move(enc);
  return claim;
}

// A channels-last patch embedding: a Conv over non-overlapping patches (strides equal to its
// kernel) transposed to [B, H, W, C], the layout SAM's ViT-Det image encoder keeps its tokens in
// for windowed attention, directly or after the position embedding's Add (where ONNX Runtime's
// transpose optimizer moves the Transpose past it).
bool is_channels_last_patch_embedding(const GraphView& g, const NodeInfo& conv, NodeId next) {
  const ValueInfo& w = g.value(conv.input(1));
  const Attribute* strides = conv.attribute("strides");
  if (strides == nullptr || !strides->integers || w.shape[2] < 2 ||
      *strides->integers != std::vector<int64_t>{w.shape[2], w.shape[3]}) {
    return false;
  }
  if (g.node(next).op_type == "Add") {
    const NodeInfo& add = g.node(next);
    const bool constant_term = std::any_of(add.inputs.begin(), add.inputs.end(), [&](ValueId v) {
      return g.value(v).constant.has_value();
    });
    const ValueInfo& sum = g.value(add.outputs[0]);
    if (!constant_term || sum.consumers.size() != 1) return false;
    next = sum.consumers[0];
  }
  const NodeInfo& transpose = g.node(next);
  const Attribute* perm = transpose.attribute("perm");
  return transpose.op_type == "Transpose" && perm != nullptr && perm->integers &&
         *perm->integers == std::vector<int64_t>{0, 2, 3, 1};
}

}  // namespace encoder

ClaimSet match_vision_encoders(const GraphView& graph, const EncoderMatcherOptions& options) {
  ClaimSet result;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const auto id = static_cast<NodeId>(i);
    const NodeInfo& node = graph.node(id);
    if (node.op_type != "Conv" || !is_standard_domain(node)) continue;
    const ValueInfo& w = graph.value(node.input(1));
    if (!w.has_shape || w.shape.size() != 4 || node.outputs.empty()) continue;
    // A candidate patch embedding: a Conv whose output is reshaped into tokens.
    const ValueInfo& out = graph.value(node.outputs[0]);
    std::vector<NodeId> data_consumers;
    for (NodeId c : out.consumers) {
      if (graph.node(c).op_type != "Shape") data_consumers.push_back(c);
    }
    if (data_consumers.size() != 1) continue;
    const std::string& next = graph.node(data_consumers[0]).op_type;
    const bool channels_last =
        encoder::is_channels_last_patch_embedding(graph, node, data_consumers[0]);
    if (next != "Reshape" && next != "Flatten" && !channels_last) continue;
    result.candidates++;
    if (!options.enabled) {
      result.refusals.push_back({id, node.name, "disabled_by_knob", "NPUFLOW_VISION=0"});
      continue;
    }
    if (channels_last) {
      // SAM's ViT-Det image encoder: its blocks on the [B, H, W, C] token grid.
      encoder::Matcher matcher(graph, options);
      encoder::Fail why;
      if (auto claim = matcher.run_grid(id, why)) {
        claim->work = encoder::encoder_work(graph, claim->encoder);
        result.claims.push_back(std::move(*claim));
      } else {
        result.refusals.push_back({id, node.name, why.reason, why.detail});
      }
      continue;
    }
    encoder::Matcher matcher(graph, options);
    encoder::Fail why;
    auto claim = matcher.run(id, why, true);
    if (!claim && why.reason == "interleaved_node") {
      encoder::Matcher again(graph, options);
      encoder::Fail why2;
      claim = again.run(id, why2, false);
      if (!claim) why = why2;
    }
    if (claim) {
      claim->work = encoder::encoder_work(graph, claim->encoder);
      result.claims.push_back(std::move(*claim));
    } else {
      result.refusals.push_back({id, node.name, why.reason, why.detail});
    }
  }
  // Text encoders, from their token embedding. The token-type ids are a graph input too: each
  // stream (the embedding LayerNorm's output) is one candidate, however many Gathers feed it.
  std::set<ValueId> streams;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const auto id = static_cast<NodeId>(i);
    if (!encoder::is_token_embedding(graph, id)) continue;
    {
      encoder::Matcher probe(graph, options);
      encoder::Fail ignored;
      if (auto stream = probe.text_stream(id, ignored); stream && !streams.insert(*stream).second)
        continue;
    }
    result.candidates++;
    const NodeInfo& node = graph.node(id);
    if (!options.enabled) {
      result.refusals.push_back({id, node.name, "disabled_by_knob", "NPUFLOW_VISION=0"});
      continue;
    }
    encoder::Matcher matcher(graph, options);
    encoder::Fail why;
    if (auto claim = matcher.run_text(id, why)) {
      claim->work = encoder::encoder_work(graph, claim->encoder);
      result.claims.push_back(std::move(*claim));
    } else {
      result.refusals.push_back({id, node.name, why.reason, why.detail});
    }
  }
  return result;
}

}  // namespace npuflow
