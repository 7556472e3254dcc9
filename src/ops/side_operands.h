// The shapes of an encoder plan's runtime side inputs (class token, position embedding, rotary
// tables, attention biases) against the run's batch and tokens, and the rows one image reads.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace npuflow {

// The side operand's rows for one image: [.., rows, D] with a leading batch of 1 or B.
const float* side_rows(const float* data, const std::vector<int64_t>& shape, int64_t image);
// `shape` is [.., rows, d] (rows < 0: any) with leading dims of 1 or `batch` in all.
// One row repeated `rows` times in `storage`: a broadcast side operand laid out row per token.
const float* repeat_row(const float* row, int64_t rows, int64_t d, std::vector<float>& storage);

Status check_side_shape(const char* what, const std::vector<int64_t>& shape, int64_t rows,
                        int64_t d, int64_t batch);
// The attention bias's shape as the scores [B, H, T, T] see it under ONNX broadcasting (aligned
// right, missing leading dims 1); an error unless each dim is 1 or the scores'.
Result<std::vector<int64_t>> bias_layout(const std::vector<int64_t>& shape, int64_t batch,
                                         int64_t heads, int64_t tokens);

}  // namespace npuflow
