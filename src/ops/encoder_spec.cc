// The value types of an encoder's spec (ops/vit_encoder.h): names and sizes, apart from the
// plan that runs it.
#include "ops/vit_encoder.h"

namespace npuflow {

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
