#include "core/strings.h"
#include "graph/encoder/matcher.h"

namespace npuflow::encoder {
namespace {

// The element count of a constant initializer by name; -1 if it is none.
int64_t constant_count(const GraphView& g, const std::string& value_name) {
  const ValueId id = g.find_value(value_name);
  if (id == kNoValue || !g.is_constant(id) || element_size(g.value(id).type) == 0) return -1;
  return static_cast<int64_t>(g.value(id).constant->bytes / element_size(g.value(id).type));
}

}  // namespace

// Every constant the kernel indexes per element must have exactly the elements it reads: a
// 1-element LayerNorm scale is valid ONNX (it broadcasts) but the kernel reads gamma[i] for every
// channel. Broadcast forms are refused here rather than trusted there.
bool Matcher::constants_fit(const VisionEncoderClaim& enc, int64_t tokens, Fail& why) const {
  const int64_t d = enc.hidden;
  auto vector_of = [&](const std::string& value_name, int64_t want, const char* what) {
    if (value_name.empty()) return true;
    const int64_t got = constant_count(g_, value_name);
    if (got == want) return true;
    why = {"constant_shape", str_cat(what, " '", value_name, "' has ", got,
                                     " elements where the encoder reads ", want)};
    return false;
  };
  auto norm_fits = [&](const NormRef& norm, const char* what) {
    return vector_of(norm.gamma, d, what) && vector_of(norm.beta, d, what);
  };
  auto dense_fits = [&](const DenseRef& dense, int64_t n, const char* what) {
    return vector_of(dense.bias, n, what);
  };
  if (enc.pre_norm && !norm_fits(*enc.pre_norm, "the pre-encoder LayerNorm")) return false;
  for (const NormRef& norm : enc.exit_norms)
    if (!norm_fits(norm, "an exit LayerNorm")) return false;
  for (const EncoderLayerRef& layer : enc.layers) {
    const int64_t qkv_bias = layer.fused_qkv ? 3 * d : d;
    if (!norm_fits(layer.norm1, "a block's first LayerNorm") ||
        !norm_fits(layer.norm2, "a block's second LayerNorm") ||
        !dense_fits(layer.q, qkv_bias, "a query bias") ||
        !dense_fits(layer.k, qkv_bias, "a key bias") ||
        !dense_fits(layer.v, qkv_bias, "a value bias") ||
        !dense_fits(layer.o, d, "an output projection bias") ||
        !vector_of(layer.layer_scale1, d, "a LayerScale") ||
        !vector_of(layer.layer_scale2, d, "a LayerScale"))
      return false;
  }
  if (!enc.from_pixels) return true;
  if (!vector_of(enc.patch_bias, d, "the patch embedding bias")) return false;
  // The kernel copies the same register rows into every image.
  if (enc.registers.present && enc.registers.gather_indices.empty() &&
      !vector_of(enc.registers.constant, enc.register_count * d, "the register tokens"))
    return false;
  for (const SideRef* side : {&enc.cls, &enc.pos}) {
    if (!side->present || (side->constant.empty() && side->values.empty())) continue;
    const std::vector<int64_t>& shape =
        side->values.empty() ? g_.value(g_.find_value(side->constant)).shape : side->values_shape;
    const char* what = side == &enc.cls ? "the class token" : "the position embedding";
    if (shape.empty() || shape.back() != d) {
      why = {"constant_shape",
             str_cat(what, " '", side->constant, "' does not end in ", d, " channels")};
      return false;
    }
    // A constant serves every image alike: leading dims of 1 (an empty one, a constant ORT folded
    // from an Expand to a computed batch of 0, is valid ONNX, and refused).
    int64_t lead = 1;
    for (size_t i = 0; i + 2 < shape.size(); ++i) lead *= shape[i];
    if (lead != 1 || (shape.size() >= 2 && shape[shape.size() - 2] < 1)) {
      why = {"constant_shape", str_cat(what, " has shape ", shape_string(shape),
                                       ", not rows of one image")};
      return false;
    }
    // A position embedding has a row per token (the kernel adds it row by row); a broadcast
    // one is valid ONNX, and refused.
    const int64_t rows_given =
        side->gather_indices.empty()
            ? (shape.size() >= 2 ? shape[shape.size() - 2] : 1)
            : element_count(g_.value(g_.find_value(side->gather_indices)).shape);
    // Register tokens are inserted after the position embedding: it has no rows for them.
    const int64_t embedded = tokens - enc.register_count;
    if (side == &enc.pos && tokens > 0 && rows_given != embedded) {
      why = {"constant_shape", str_cat(what, " '", side->constant, "' has ", rows_given,
                                       " rows for ", embedded, " tokens")};
      return false;
    }
    if (side->gather_indices.empty()) continue;
    const auto indices = int_constant(g_.find_value(side->gather_indices));
    const int64_t rows = shape.size() == 2 ? shape[0] : -1;
    for (int64_t index : indices.value_or(std::vector<int64_t>{})) {
      if (rows < 0 || index < -rows || index >= rows) {
        why = {"constant_shape",
               str_cat(what, " gathers row ", index, " of a ", rows, "-row table")};
        return false;
      }
    }
  }
  return true;
}

}  // namespace npuflow::encoder
