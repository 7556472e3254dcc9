#include "ops/convolution_fp16.h"

#include <algorithm>
#include <cmath>

#include "core/fp16.h"
#include "core/strings.h"

namespace npuflow {

Status input_beyond_fp16(const std::string& name, std::atomic<bool>& logged, const Logger& logger) {
  if (!logged.exchange(true)) {
    logger.info(str_cat(name, ": an input beyond fp16's range; such calls run on the host"));
  }
  return unsupported("an input value beyond fp16's range");
}

Status widen_device_output(const uint16_t* out, int64_t full_h, int64_t full_w, int64_t row0,
                           int64_t col0, const std::vector<float>& bias, int64_t oh, int64_t ow,
                           const float* x, int64_t x_count, float* y) {
  bool overflowed = false;
  const auto planes = static_cast<int64_t>(bias.size());
  for (int64_t o = 0; o < planes; ++o) {
    const float b = bias[static_cast<size_t>(o)];
    for (int64_t r = 0; r < oh; ++r) {
      const uint16_t* from = out + (o * full_h + r + row0) * full_w + col0;
      float* to = y + (o * oh + r) * ow;
      for (int64_t c = 0; c < ow; ++c) {
        overflowed = overflowed || (from[c] & 0x7fffu) == 0x7c00u;
        to[c] = half_bits_to_float(from[c]) + b;
      }
    }
  }
  if (overflowed && std::all_of(x, x + x_count, [](float v) { return std::isfinite(v); })) {
    return unsupported("the fp16 output overflowed");
  }
  return Status::ok();
}

}  // namespace npuflow
