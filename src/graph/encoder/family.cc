#include <algorithm>

#include "core/strings.h"
#include "graph/encoder/matcher.h"

namespace npuflow::encoder {

std::string encoder_family(const VisionEncoderClaim& enc) {
  const bool layer_scale = !enc.layers.empty() && !enc.layers[0].layer_scale1.empty();
  int taps = 0;
  for (const auto& e : enc.exits) taps += e.norm >= 0 && e.stream_index > 0 ? 1 : 0;
  const bool windowed = std::any_of(enc.layers.begin(), enc.layers.end(),
                                    [](const EncoderLayerRef& l) { return l.attention_group > 1; });
  if (std::any_of(enc.layers.begin(), enc.layers.end(),
                  [](const EncoderLayerRef& l) { return l.grid.has_value(); }))
    return "sam";
  if (layer_scale && windowed) return "dinov2_windowed";
  if (layer_scale && taps >= 4) return "depth_anything";
  if (layer_scale) return "dinov2";
  if (enc.pre_norm && enc.layers[0].activation == EncoderActivation::kQuickGelu) return "clip";
  if (!enc.cls.present && enc.from_pixels) return "siglip";
  return "vit";
}

// From the weights' and exits' shapes. Rows are batch x tokens (-1 when the token count is
// symbolic; a symbolic batch counts as one image).
std::vector<GemmWork> encoder_work(const GraphView& graph, const VisionEncoderClaim& enc) {
  auto dims = [&](const DenseRef& dense) -> std::pair<int64_t, int64_t> {
    const ValueId id = graph.find_value(dense.weight);
    if (id == kNoValue || graph.value(id).shape.size() != 2) return {0, 0};
    const auto& shape = graph.value(id).shape;
    auto [k, n] = dense.transposed ? std::pair{shape[1], shape[0]} : std::pair{shape[0], shape[1]};
    return std::pair{k, dense.cols > 0 ? dense.cols : n};
  };
  int64_t rows = -1, tokens = -1, batch = -1;
  if (!enc.exits.empty()) {
    const ValueId exit = graph.find_value(enc.exits[0].value);
    const size_t rank = exit == kNoValue ? 0 : graph.value(exit).shape.size();
    if (exit != kNoValue && graph.value(exit).has_shape && (rank == 3 || rank == 4)) {
      // A symbolic batch counts as one image; a grid [B, H, W, D] has H x W tokens.
      const auto& shape = graph.value(exit).shape;
      tokens = rank == 4 && shape[1] > 0 && shape[2] > 0 ? shape[1] * shape[2] : shape[1];
      batch = shape[0] > 0 ? shape[0] : 1;
      rows = tokens > 0 ? batch * tokens : -1;
    }
  }
  std::vector<GemmWork> work;
  const int64_t heads = std::max<int64_t>(enc.heads, 1);
  const int64_t head_dim = enc.hidden / heads;
  const int64_t score_rows = batch > 0 && tokens > 0 ? batch * heads * tokens : -1;
  for (size_t i = 0; i < enc.layers.size(); ++i) {
    const EncoderLayerRef& layer = enc.layers[i];
    // Each query attends over its group's sequences (a windowed encoder's global block).
    int64_t keys = tokens > 0 ? tokens * layer.attention_group : tokens;
    // SAM's windows: the zero-padded grid's rows are projected and attend within their window.
    int64_t qkv_rows = rows, layer_score_rows = score_rows;
    if (layer.grid && layer.grid->window > 0 && batch > 0) {
      const int64_t w = layer.grid->window;
      const int64_t padded =
          (layer.grid->grid_h + w - 1) / w * ((layer.grid->grid_w + w - 1) / w) * w * w;
      qkv_rows = batch * padded;
      layer_score_rows = batch * heads * padded;
      keys = w * w;
    }
    const std::string prefix = str_cat("layer", i, ".");
    const auto [qk, qn] = dims(layer.q);
    const auto [kk, kn] = dims(layer.k);
    const auto [vk, vn] = dims(layer.v);
    (void)kk;
    (void)vk;
    work.push_back({prefix + "qkv", qkv_rows, qk, qn + kn + vn, ElementType::kFloat32, false});
    // Per head: scores = Q K^T (contract head_dim), values = P V (contract tokens).
    work.push_back(
        {prefix + "scores", layer_score_rows, head_dim, keys, ElementType::kFloat32, true});
    work.push_back(
        {prefix + "values", layer_score_rows, keys, head_dim, ElementType::kFloat32, true});
    const auto [ok, on] = dims(layer.o);
    work.push_back({prefix + "o", rows, ok, on, ElementType::kFloat32, false});
    const auto [f1k, f1n] = dims(layer.fc1);
    work.push_back({prefix + "fc1", rows, f1k, f1n, ElementType::kFloat32, false});
    const auto [f2k, f2n] = dims(layer.fc2);
    work.push_back({prefix + "fc2", rows, f2k, f2n, ElementType::kFloat32, false});
  }
  return work;
}

}  // namespace npuflow::encoder
