#include "host/fp16_conv.h"

#include <vector>

#include "core/fp16.h"

namespace npuflow {
namespace {

std::vector<float> widened(const uint16_t* half, int64_t count) {
  std::vector<float> out(static_cast<size_t>(count));
  for (size_t i = 0; i < out.size(); ++i) out[i] = half_bits_to_float(half[i]);
  return out;
}

// The input pixel (one axis) that kernel tap `tap` of output `out` reads, or -1 where it reads
// padding. Forward: in = out * stride + tap * dil - pad. Transposed: out = in * stride - pad +
// tap * dil, so in = (out + pad - tap * dil) / stride where that divides.
int64_t forward_source(int64_t out, int64_t tap, int64_t stride, int64_t pad, int64_t dil,
                       int64_t in) {
  const int64_t at = out * stride + tap * dil - pad;
  return at >= 0 && at < in ? at : -1;
}
int64_t transposed_source(int64_t out, int64_t tap, int64_t stride, int64_t pad, int64_t dil,
                          int64_t in) {
  const int64_t at = out + pad - tap * dil;
  if (at < 0 || at % stride != 0 || at / stride >= in) return -1;
  return at / stride;
}

// The shared loop: output channel `o` of an oh x ow output from `input` (ic x ih x iw, widened)
// and `weight_at(c, i, j)` (widened), `source(y|x, tap)` finding the input pixel of a tap.
template <typename Call, typename Weight, typename SourceY, typename SourceX>
void output_channel(const Call& call, int64_t o, int64_t oh, int64_t ow,
                    const std::vector<float>& input, Weight&& weight_at, SourceY&& source_y,
                    SourceX&& source_x) {
  const int64_t c0 = call.depthwise ? o : 0, c1 = call.depthwise ? o + 1 : call.ic;
  uint16_t* out = call.out + o * oh * ow;
  for (int64_t y = 0; y < oh; ++y) {
    for (int64_t x = 0; x < ow; ++x) {
      float acc = 0.0f;
      for (int64_t c = c0; c < c1; ++c) {
        const float* plane = input.data() + c * call.ih * call.iw;
        for (int64_t i = 0; i < call.kh; ++i) {
          const int64_t r = source_y(y, i);
          if (r < 0) continue;
          for (int64_t j = 0; j < call.kw; ++j) {
            const int64_t s = source_x(x, j);
            if (s >= 0) acc += plane[r * call.iw + s] * weight_at(c, i, j);
          }
        }
      }
      out[y * ow + x] = float_to_half_bits(acc);
    }
  }
}

}  // namespace

void fp16_conv2d_reference(const Fp16Conv2d& call, const ExecContext& context) {
  const int64_t oh = conv2d_output_height(call), ow = conv2d_output_width(call);
  const int64_t taps = call.kh * call.kw, per_filter = (call.depthwise ? 1 : call.ic) * taps;
  const std::vector<float> input = widened(call.input, call.ic * call.ih * call.iw);
  const std::vector<float> weight = widened(call.weight, call.oc * per_filter);
  context.run(static_cast<size_t>(call.oc), [&](size_t index) {
    const auto o = static_cast<int64_t>(index);
    const float* filter = weight.data() + o * per_filter;
    const int64_t c0 = call.depthwise ? o : 0;
    output_channel(
        call, o, oh, ow, input,
        [&](int64_t c, int64_t i, int64_t j) { return filter[(c - c0) * taps + i * call.kw + j]; },
        [&](int64_t y, int64_t i) {
          return forward_source(y, i, call.stride_y, call.pad_top, call.dil_y, call.ih);
        },
        [&](int64_t x, int64_t j) {
          return forward_source(x, j, call.stride_x, call.pad_left, call.dil_x, call.iw);
        });
  });
}

void fp16_conv_transpose2d_reference(const Fp16ConvTranspose2d& call, const ExecContext& context) {
  const int64_t oh = conv_transpose2d_output_height(call), ow = conv_transpose2d_output_width(call);
  const int64_t taps = call.kh * call.kw;
  const std::vector<float> input = widened(call.input, call.ic * call.ih * call.iw);
  // Direct: weight[c][o][i][j]; depthwise: weight[c][0][i][j].
  const int64_t per_input = (call.depthwise ? 1 : call.oc) * taps;
  const std::vector<float> weight = widened(call.weight, call.ic * per_input);
  context.run(static_cast<size_t>(call.oc), [&](size_t index) {
    const auto o = static_cast<int64_t>(index);
    const int64_t column = call.depthwise ? 0 : o;
    output_channel(
        call, o, oh, ow, input,
        [&](int64_t c, int64_t i, int64_t j) {
          return weight[static_cast<size_t>(c * per_input + column * taps + i * call.kw + j)];
        },
        [&](int64_t y, int64_t i) {
          return transposed_source(y, i, call.stride_y, call.pad_top, call.dil_y, call.ih);
        },
        [&](int64_t x, int64_t j) {
          return transposed_source(x, j, call.stride_x, call.pad_left, call.dil_x, call.iw);
        });
  });
}

}  // namespace npuflow
