#include "quant/dynamic_quantize.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "quant/round_half_even.h"

namespace npuflow {
namespace {

// Elements per task: a call over an encoder's [B, T, D] activation splits into a few tasks.
constexpr int64_t kChunk = 16384;
// Independent lanes: the compiler turns each loop over them into vector min/max and adds.
constexpr int kLanes = 16;

struct Range {
  float lo = 0.0f, hi = 0.0f;
};

// std::min / std::max order: a NaN never enters, and 0 stays +0 (-0 < 0 is false), so the lanes
// give the same range as one sequential pass.
Range range_of(const float* x, int64_t count) {
  float lo[kLanes] = {}, hi[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      lo[j] = x[i + j] < lo[j] ? x[i + j] : lo[j];
      hi[j] = hi[j] < x[i + j] ? x[i + j] : hi[j];
    }
  }
  Range range;
  for (int j = 0; j < kLanes; ++j) {
    range.lo = std::min(range.lo, lo[j]);
    range.hi = std::max(range.hi, hi[j]);
  }
  for (; i < count; ++i) {
    range.lo = std::min(range.lo, x[i]);
    range.hi = std::max(range.hi, x[i]);
  }
  return range;
}

void quantize_span(const float* x, int64_t count, DynamicQuantization params, uint8_t* out) {
  const float lower = -static_cast<float>(params.zero_point);
  const float upper = 255.0f - static_cast<float>(params.zero_point);
  const int32_t zero_point = params.zero_point;
  for (int64_t i = 0; i < count; ++i) {
    float v = x[i] / params.scale;
    v = v > lower ? v : lower;  // a NaN compares false and takes the lower bound
    v = v < upper ? v : upper;
    v = round_half_even(v);
    out[i] = static_cast<uint8_t>(static_cast<int32_t>(v) + zero_point);
  }
}

size_t chunks_of(int64_t count) {
  return static_cast<size_t>(std::max<int64_t>(1, (count + kChunk - 1) / kChunk));
}

}  // namespace

DynamicQuantization dynamic_quantization_params(const float* x, int64_t count,
                                                const ExecContext& context) {
  std::vector<Range> partial(chunks_of(count));
  context.run(partial.size(), [&](size_t c) {
    const int64_t begin = static_cast<int64_t>(c) * kChunk;
    partial[c] = range_of(x + begin, std::min(kChunk, count - begin));
  });
  float lo = 0.0f;
  float hi = 0.0f;
  for (const Range& r : partial) {
    lo = std::min(lo, r.lo);
    hi = std::max(hi, r.hi);
  }
  DynamicQuantization params;
  params.scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
  const float initial_zero_point = 0.0f - lo / params.scale;
  // nearbyint rounds half to even under the default rounding mode.
  params.zero_point =
      static_cast<uint8_t>(std::nearbyint(std::clamp(initial_zero_point, 0.0f, 255.0f)));
  return params;
}

void quantize_uint8(const float* x, int64_t count, DynamicQuantization params, uint8_t* out,
                    const ExecContext& context) {
  context.run(chunks_of(count), [&](size_t c) {
    const int64_t begin = static_cast<int64_t>(c) * kChunk;
    quantize_span(x + begin, std::min(kChunk, count - begin), params, out + begin);
  });
}

}  // namespace npuflow
