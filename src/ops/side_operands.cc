#include "ops/side_operands.h"

#include <cstddef>
#include <cstring>

#include "core/strings.h"

namespace npuflow {

const float* side_rows(const float* data, const std::vector<int64_t>& shape, int64_t image) {
  int64_t lead = 1;
  for (size_t i = 0; i + 2 < shape.size(); ++i) lead *= shape[i];
  const int64_t per = shape.size() >= 2 ? shape[shape.size() - 2] * shape.back() : 0;
  return data + (lead > 1 ? image * per : 0);
}

const float* repeat_row(const float* row, int64_t rows, int64_t d, std::vector<float>& storage) {
  storage.resize(static_cast<size_t>(rows * d));
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(storage.data() + r * d, row, static_cast<size_t>(d) * sizeof(float));
  }
  return storage.data();
}

Status check_side_shape(const char* what, const std::vector<int64_t>& shape, int64_t rows,
                        int64_t d, int64_t batch) {
  if (shape.size() < 2 || shape.back() != d || (rows >= 0 && shape[shape.size() - 2] != rows)) {
    return invalid_argument(
        str_cat(what, " has shape ", shape_string(shape), ", expected [..,", rows, ",", d, "]"));
  }
  int64_t lead = 1;
  for (size_t i = 0; i + 2 < shape.size(); ++i) lead *= shape[i];
  if (lead != 1 && lead != batch) {
    return invalid_argument(
        str_cat(what, " has shape ", shape_string(shape), " for batch ", batch));
  }
  return Status::ok();
}

Result<std::vector<int64_t>> bias_layout(const std::vector<int64_t>& shape, int64_t batch,
                                         int64_t heads, int64_t tokens) {
  const int64_t want[4] = {batch, heads, tokens, tokens};
  std::vector<int64_t> aligned(4, 1);
  bool ok = shape.size() <= 4;
  for (size_t i = 0; ok && i < shape.size(); ++i) aligned[4 - shape.size() + i] = shape[i];
  for (size_t i = 0; ok && i < 4; ++i) ok = aligned[i] == 1 || aligned[i] == want[i];
  if (ok) return aligned;
  return invalid_argument(str_cat("attention bias has shape ", shape_string(shape),
                                  "; it does not broadcast to [", batch, ", ", heads, ", ", tokens,
                                  ", ", tokens, "]"));
}

}  // namespace npuflow
