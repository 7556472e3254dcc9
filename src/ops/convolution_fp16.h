// What the claimed convolutions' fp16 device paths share (ops/conv2d.h, ops/conv_transpose.h):
// the refusal of an input fp16 cannot hold, and the device's fp16 output widened to fp32.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/log.h"
#include "core/status.h"

namespace npuflow {

// The refusal for an input beyond fp16's range (the image then reruns on the host), logged at
// info the first time `logged` sees one.
Status input_beyond_fp16(const std::string& name, std::atomic<bool>& logged, const Logger& logger);

// The device's output, bias.size() planes of full_h x full_w in fp16, into y's planes of oh x ow
// in fp32 with the bias added, each read from (row0, col0) of its plane. An infinity there while
// the input x (x_count values) is finite is fp16's overflow, not the model's value: unsupported,
// and the caller reruns the image on the host.
Status widen_device_output(const uint16_t* out, int64_t full_h, int64_t full_w, int64_t row0,
                           int64_t col0, const std::vector<float>& bias, int64_t oh, int64_t ow,
                           const float* x, int64_t x_count, float* y);

}  // namespace npuflow
