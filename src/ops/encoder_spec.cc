// The value types of an encoder's spec (ops/vit_encoder.h): names and sizes, and what the spec
// asks of an fp16 device, apart from the plan that runs it.
#include <cmath>

#include "core/strings.h"
#include "ops/vit_encoder.h"

namespace npuflow {
namespace {

// Why fp16 rounding must not reach a layer's q and k, or "" when it may. A softmax logit moves
// by about |logit| * 2^-10 when q and k carry fp16 rounding; trained models keep logits at O(10)
// with the usual 1/sqrt(head_dim) scale, so that is noise. A scale far beyond it (or one that is
// not finite) makes the softmax an argmax that such rounding reorders, wherever it came from.
constexpr float kMaxScaleOverNominal = 16.0f;

std::string fp16_attention_hazard(float scale, int64_t head_dim) {
  const float nominal = 1.0f / std::sqrt(static_cast<float>(head_dim));
  if (!std::isfinite(scale)) return "the attention scale is not finite";
  if (std::fabs(scale) <= kMaxScaleOverNominal * nominal) return {};
  return str_cat("the attention scale ", scale, " is ", std::fabs(scale) / nominal,
                 "x 1/sqrt(head_dim): fp16 rounding before its softmax would reorder it");
}

}  // namespace

int64_t last_fp16_attention_hazard(const VitEncoderSpec& spec, std::string* why) {
  int64_t last = -1;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    std::string reason =
        fp16_attention_hazard(spec.layers[i].attention_scale, spec.hidden / spec.heads);
    if (!reason.empty()) {
      last = static_cast<int64_t>(i);
      *why = std::move(reason);
    }
  }
  return last;
}

const char* encoder_activation_name(EncoderActivation activation) {
  switch (activation) {
    case EncoderActivation::kGeluErf:
      return "gelu_erf";
    case EncoderActivation::kGeluTanh:
      return "gelu_tanh";
    case EncoderActivation::kQuickGelu:
      return "quick_gelu";
  }
  return "?";
}

int64_t FloatRef::count() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace npuflow
