// SPDX-License-Identifier: GPL-3.0-or-later
// RocketDevice's composed calls: flash attention (rocket_flash_attn_fp16_ctx) and fp16
// convolutions (rocket_conv2d_fp16_ctx, rocket_conv_transpose2d_fp16_ctx).
#include <algorithm>
#include <initializer_list>
#include <limits>
#include <vector>

#include "core/fp16.h"
#include "rocket/rocket_device_state.h"

namespace npuflow::rocket {

Status RocketDevice::attention_fp16(const Fp16Attention& call, const ExecContext& context) {
  NPUFLOW_RETURN_IF_ERROR(check_attention_call(call));
  const RocketLibrary& lib = *state_->library;
  if (!lib.has_flash_attention()) {
    return unsupported(str_cat("librocketnpu '", lib.path, "' has no rocket_flash_attn_fp16_ctx"));
  }
  if (call.relative.present()) return attention_in_bands(call, context);
  constexpr const char* kEntry = "rocket_flash_attn_fp16_ctx";
  int code = 0;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    NPUFLOW_RETURN_IF_ERROR(
        state_->ensure_context(state_->attention_ctx, "rocket_fa_ctx_create", lib.fa_ctx_create));
    state_->count(kEntry);
    code = state_->call_with_pool(context, [&] {
      const auto half = [](const uint16_t* bits) {
        return reinterpret_cast<const _Float16*>(bits);
      };
      return lib.flash_attn_fp16_ctx(
          state_->attention_ctx, static_cast<int>(call.tokens), static_cast<int>(call.kv),
          static_cast<int>(call.head_dim), static_cast<int>(call.dv), static_cast<int>(call.heads),
          static_cast<int>(call.kv_heads), call.scale, call.softcap, half(call.q), half(call.k),
          half(call.v), call.mask != nullptr ? half(call.mask) : nullptr,
          reinterpret_cast<_Float16*>(call.out));
    });
  }
  if (code != ROCKET_OK) {
    return state_->refuse(kEntry, code,
                          str_cat(kEntry, " at tokens=", call.tokens, " kv=", call.kv, " head_dim=",
                                  call.head_dim, " dv=", call.dv, " heads=", call.heads));
  }
  return Status::ok();
}

// librocketnpu's flash attention takes one dense mask for all of a call's heads, and a relative
// bias differs per head and per query: it runs per head and per band of queries, each band's mask
// built from the factors (the mask's row, then the row and column terms, rounded to fp16 once), so
// that no tokens x kv array is ever made.
Status RocketDevice::attention_in_bands(const Fp16Attention& call, const ExecContext& context) {
  constexpr int64_t kBandMaskBytes = int64_t{1} << 20;
  const int64_t t = call.tokens, kv = call.kv, group = call.heads / call.kv_heads;
  const int64_t band = std::clamp<int64_t>(kBandMaskBytes / (kv * 2), 1, t);
  std::vector<float> scores(static_cast<size_t>(kv));
  std::vector<uint16_t> mask(static_cast<size_t>(band * kv));
  for (int64_t head = 0; head < call.heads; ++head) {
    const int64_t kv_head = head / group;
    for (int64_t first = 0; first < t; first += band) {
      const int64_t rows = std::min(band, t - first);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t query = first + r;
        for (int64_t j = 0; j < kv; ++j) {
          scores[j] = call.mask != nullptr ? half_bits_to_float(call.mask[query * kv + j]) : 0.0f;
        }
        add_relative_bias(call, head, query, scores.data());
        for (int64_t j = 0; j < kv; ++j) {
          const uint16_t half = float_to_half_bits(scores[j]);
          if (half != kHalfMinusInfinity && (half & 0x7c00u) == 0x7c00u) {
            return unsupported("a relative attention bias sum is beyond fp16's range");
          }
          mask[r * kv + j] = half;
        }
      }
      Fp16Attention part = call;
      part.tokens = rows;
      part.heads = part.kv_heads = 1;
      part.q = call.q + (head * t + first) * call.head_dim;
      part.k = call.k + kv_head * kv * call.head_dim;
      part.v = call.v + kv_head * call.dv * kv;
      part.mask = mask.data();
      part.out = call.out + (head * t + first) * call.dv;
      part.relative = {};
      NPUFLOW_RETURN_IF_ERROR(attention_fp16(part, context));
    }
  }
  return Status::ok();
}

namespace {

bool fits_int(std::initializer_list<int64_t> values) {
  for (int64_t value : values) {
    if (value > std::numeric_limits<int>::max()) return false;
  }
  return true;
}

// The library's descriptor for a call (checked by fits_int): the fields both kinds share.
template <typename Desc, typename Call>
Desc conv_desc(const Call& call) {
  Desc d{};
  d.ic = static_cast<int>(call.ic);
  d.ih = static_cast<int>(call.ih);
  d.iw = static_cast<int>(call.iw);
  d.oc = static_cast<int>(call.oc);
  d.kh = static_cast<int>(call.kh);
  d.kw = static_cast<int>(call.kw);
  d.stride_y = static_cast<int>(call.stride_y);
  d.stride_x = static_cast<int>(call.stride_x);
  d.pad_top = static_cast<int>(call.pad_top);
  d.pad_left = static_cast<int>(call.pad_left);
  d.dil_y = static_cast<int>(call.dil_y);
  d.dil_x = static_cast<int>(call.dil_x);
  d.depthwise = call.depthwise ? 1 : 0;
  return d;
}

const _Float16* as_half(const uint16_t* bits) {
  return reinterpret_cast<const _Float16*>(bits);
}

// The library's depthwise channel group (ROCKET_CONV_DW_GROUP's default): a depthwise call takes
// C % 32 channels.
constexpr int64_t kDepthwiseGroup = 32;

// A depthwise call's operands with C padded to the channel group: zero planes in, zero filters,
// the padded planes' outputs dropped. Sets *input, *weight and *out to what the library takes and
// returns the padded channel count (C itself when no padding is needed).
int64_t pad_depthwise(int64_t channels, int64_t in_plane, int64_t taps, int64_t out_plane,
                      std::vector<uint16_t>& input_buffer, std::vector<uint16_t>& weight_buffer,
                      std::vector<uint16_t>& out_buffer, const uint16_t** input,
                      const uint16_t** weight, uint16_t** out) {
  if (channels % kDepthwiseGroup == 0) return channels;
  const int64_t padded = round_up(channels, kDepthwiseGroup);
  input_buffer.assign(static_cast<size_t>(padded * in_plane), uint16_t{0});
  std::copy(*input, *input + channels * in_plane, input_buffer.begin());
  weight_buffer.assign(static_cast<size_t>(padded * taps), uint16_t{0});
  std::copy(*weight, *weight + channels * taps, weight_buffer.begin());
  out_buffer.resize(static_cast<size_t>(padded * out_plane));
  *input = input_buffer.data();
  *weight = weight_buffer.data();
  *out = out_buffer.data();
  return padded;
}

}  // namespace

Status RocketDevice::conv2d_fp16(const Fp16Conv2d& call, const ExecContext& context) {
  NPUFLOW_RETURN_IF_ERROR(check_conv2d_call(call));
  const int64_t oh = conv2d_output_height(call), ow = conv2d_output_width(call);
  // The direct path takes OC % 16: zero filters pad it, their outputs are dropped.
  const bool pad = !call.depthwise && call.oc % kFp16NMultiple != 0;
  const int64_t ocp = pad ? round_up(call.oc, kFp16NMultiple) : call.oc;
  const int64_t filter = call.ic * call.kh * call.kw;
  if (!fits_int({call.ic, call.ih, call.iw, ocp, call.kh, call.kw, call.stride_y, call.stride_x,
                 call.pad_top, call.pad_left, call.dil_y, call.dil_x, ocp * filter,
                 ocp * oh * ow})) {
    return unsupported("conv2d beyond the library's int extents");
  }
  if (call.depthwise && !fits_int({round_up(call.ic, kDepthwiseGroup) * call.ih * call.iw,
                                   round_up(call.ic, kDepthwiseGroup) * oh * ow})) {
    return unsupported("depthwise conv2d beyond the library's int extents");
  }
  auto d = conv_desc<rocket_conv2d_desc>(call);
  d.oc = static_cast<int>(ocp);
  const RocketLibrary& lib = *state_->library;
  return state_->run_convolution(
      "rocket_conv2d_fp16_ctx", context,
      str_cat(call.ic, "x", call.ih, "x", call.iw, " -> ", call.oc, " kernel ", call.kh, "x",
              call.kw, call.depthwise ? " depthwise" : ""),
      [&](rocket_conv_ctx* ctx) {
        const uint16_t* input = call.input;
        const uint16_t* weight = call.weight;
        uint16_t* out = call.out;
        int64_t channels = call.ic;
        if (call.depthwise) {
          channels = pad_depthwise(call.ic, call.ih * call.iw, call.kh * call.kw, oh * ow,
                                   state_->conv_input, state_->conv_weight, state_->conv_out,
                                   &input, &weight, &out);
          d.ic = d.oc = static_cast<int>(channels);
        }
        if (pad) {
          uint16_t* padded = State::grown(state_->conv_weight, ocp * filter);
          std::copy(call.weight, call.weight + call.oc * filter, padded);
          std::fill(padded + call.oc * filter, padded + ocp * filter, uint16_t{0});
          weight = padded;
          out = State::grown(state_->conv_out, ocp * oh * ow);
        }
        const int code = lib.conv2d_fp16_ctx(ctx, &d, as_half(input), as_half(weight),
                                             reinterpret_cast<_Float16*>(out));
        if (code == ROCKET_OK && out != call.out) std::copy(out, out + call.oc * oh * ow, call.out);
        return code;
      });
}

Status RocketDevice::conv_transpose2d_fp16(const Fp16ConvTranspose2d& call,
                                           const ExecContext& context) {
  NPUFLOW_RETURN_IF_ERROR(check_conv_transpose2d_call(call));
  if (!fits_int(
          {call.ic, call.ih, call.iw, call.oc, call.kh, call.kw, call.stride_y, call.stride_x,
           call.pad_top, call.pad_left, call.dil_y, call.dil_x,
           call.oc * conv_transpose2d_output_height(call) * conv_transpose2d_output_width(call)})) {
    return unsupported("conv_transpose2d beyond the library's int extents");
  }
  // The library zero-pads the direct form's OC and IC itself; a depthwise call's C is padded here.
  const int64_t oh = conv_transpose2d_output_height(call), ow = conv_transpose2d_output_width(call);
  if (call.depthwise && !fits_int({round_up(call.ic, kDepthwiseGroup) * call.ih * call.iw,
                                   round_up(call.ic, kDepthwiseGroup) * oh * ow})) {
    return unsupported("depthwise conv_transpose2d beyond the library's int extents");
  }
  auto d = conv_desc<rocket_conv_transpose2d_desc>(call);
  d.opad_y = static_cast<int>(call.opad_y);
  d.opad_x = static_cast<int>(call.opad_x);
  const RocketLibrary& lib = *state_->library;
  return state_->run_convolution(
      "rocket_conv_transpose2d_fp16_ctx", context,
      str_cat(call.ic, "x", call.ih, "x", call.iw, " -> ", call.oc, " kernel ", call.kh, "x",
              call.kw, " stride ", call.stride_y, "x", call.stride_x,
              call.depthwise ? " depthwise" : ""),
      [&](rocket_conv_ctx* ctx) {
        const uint16_t* input = call.input;
        const uint16_t* weight = call.weight;
        uint16_t* out = call.out;
        if (call.depthwise) {
          const int64_t channels = pad_depthwise(call.ic, call.ih * call.iw, call.kh * call.kw,
                                                 oh * ow, state_->conv_input, state_->conv_weight,
                                                 state_->conv_out, &input, &weight, &out);
          d.ic = d.oc = static_cast<int>(channels);
        }
        const int code = lib.conv_transpose2d_fp16_ctx(ctx, &d, as_half(input), as_half(weight),
                                                       reinterpret_cast<_Float16*>(out));
        if (code == ROCKET_OK && out != call.out) std::copy(out, out + call.oc * oh * ow, call.out);
        return code;
      });
}

}  // namespace npuflow::rocket
