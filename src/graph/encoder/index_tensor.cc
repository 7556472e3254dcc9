#include "graph/encoder/index_tensor.h"

#include <cstddef>
#include <utility>

namespace npuflow::encoder {

IndexTensor IndexTensor::iota(std::vector<int64_t> shape) {
  IndexTensor t;
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  t.shape = std::move(shape);
  t.data.resize(static_cast<size_t>(count > 0 ? count : 0));
  for (size_t i = 0; i < t.data.size(); ++i) t.data[i] = static_cast<int32_t>(i);
  return t;
}

bool IndexTensor::reshape(std::vector<int64_t> target) {
  int64_t known = 1, unknown = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == 0 && i < shape.size()) target[i] = shape[i];
    if (target[i] == -1) {
      if (unknown >= 0) return false;
      unknown = static_cast<int64_t>(i);
    } else if (target[i] <= 0) {
      return false;
    } else {
      known *= target[i];
    }
  }
  const auto total = static_cast<int64_t>(data.size());
  if (unknown >= 0) {
    if (known == 0 || total % known) return false;
    target[static_cast<size_t>(unknown)] = total / known;
  } else if (known != total) {
    return false;
  }
  shape = target;
  return true;
}
bool IndexTensor::transpose(const std::vector<int64_t>& perm) {
  const size_t rank = shape.size();
  if (perm.size() != rank) return false;
  std::vector<int64_t> out_shape(rank), in_strides(rank, 1);
  for (size_t i = rank; i-- > 1;) in_strides[i - 1] = in_strides[i] * shape[i];
  for (size_t i = 0; i < rank; ++i) {
    if (perm[i] < 0 || perm[i] >= static_cast<int64_t>(rank)) return false;
    out_shape[i] = shape[static_cast<size_t>(perm[i])];
  }
  std::vector<int32_t> out(data.size());
  std::vector<int64_t> idx(rank, 0);
  for (size_t flat = 0; flat < data.size(); ++flat) {
    int64_t src = 0;
    for (size_t i = 0; i < rank; ++i) src += idx[i] * in_strides[static_cast<size_t>(perm[i])];
    out[flat] = data[static_cast<size_t>(src)];
    for (size_t i = rank; i-- > 0;) {
      if (++idx[i] < out_shape[i]) break;
      idx[i] = 0;
    }
  }
  shape = out_shape;
  data = std::move(out);
  return true;
}
bool IndexTensor::select(int64_t axis, int64_t start, int64_t len, bool drop) {
  const auto rank = static_cast<int64_t>(shape.size());
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank || start < 0 || len <= 0 || start + len > shape[axis]) return false;
  if (drop && len != 1) return false;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= shape[static_cast<size_t>(i)];
  for (int64_t i = axis + 1; i < rank; ++i) inner *= shape[static_cast<size_t>(i)];
  const int64_t dim = shape[static_cast<size_t>(axis)];
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(outer * len * inner));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t a = start; a < start + len; ++a)
      for (int64_t i = 0; i < inner; ++i)
        out.push_back(data[static_cast<size_t>((o * dim + a) * inner + i)]);
  data = std::move(out);
  if (drop)
    shape.erase(shape.begin() + axis);
  else
    shape[static_cast<size_t>(axis)] = len;
  return true;
}

bool IndexTensor::pad(const std::vector<int64_t>& before, const std::vector<int64_t>& after) {
  const size_t rank = shape.size();
  if (before.size() != rank || after.size() != rank) return false;
  std::vector<int64_t> out_shape(rank);
  int64_t count = 1;
  for (size_t i = 0; i < rank; ++i) {
    out_shape[i] = shape[i] + before[i] + after[i];
    if (out_shape[i] <= 0) return false;
    count *= out_shape[i];
  }
  std::vector<int32_t> out(static_cast<size_t>(count), kPadded);
  std::vector<int64_t> idx(rank, 0);
  for (size_t flat = 0; flat < out.size(); ++flat) {
    int64_t src = 0;
    bool inside = true;
    for (size_t i = 0; i < rank; ++i) {
      const int64_t at = idx[i] - before[i];
      inside = inside && at >= 0 && at < shape[i];
      src = src * shape[i] + at;
    }
    if (inside) out[flat] = data[static_cast<size_t>(src)];
    for (size_t i = rank; i-- > 0;) {
      if (++idx[i] < out_shape[i]) break;
      idx[i] = 0;
    }
  }
  shape = std::move(out_shape);
  data = std::move(out);
  return true;
}

}  // namespace npuflow::encoder
