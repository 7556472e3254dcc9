#include "graph/encoder/float_tensor.h"

#include <algorithm>
#include <cstddef>

namespace npuflow::encoder {

// ONNX (numpy) broadcasting of a binary elementwise op.
bool broadcast(const FloatTensor& a, const FloatTensor& b, bool add, FloatTensor& out) {
  const size_t rank = std::max(a.shape.size(), b.shape.size());
  std::vector<int64_t> as(rank, 1), bs(rank, 1);
  std::copy(a.shape.begin(), a.shape.end(),
            as.begin() + static_cast<std::ptrdiff_t>(rank - a.shape.size()));
  std::copy(b.shape.begin(), b.shape.end(),
            bs.begin() + static_cast<std::ptrdiff_t>(rank - b.shape.size()));
  out.shape.assign(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    if (as[i] != bs[i] && as[i] != 1 && bs[i] != 1) return false;
    out.shape[i] = std::max(as[i], bs[i]);
  }
  int64_t count = 1;
  for (int64_t d : out.shape) count *= d;
  out.data.resize(static_cast<size_t>(count));
  std::vector<int64_t> idx(rank, 0);
  for (int64_t e = 0; e < count; ++e) {
    int64_t ia = 0, ib = 0;
    for (size_t i = 0; i < rank; ++i) {
      ia = ia * as[i] + (as[i] == 1 ? 0 : idx[i]);
      ib = ib * bs[i] + (bs[i] == 1 ? 0 : idx[i]);
    }
    const float x = a.data[static_cast<size_t>(ia)], y = b.data[static_cast<size_t>(ib)];
    out.data[static_cast<size_t>(e)] = add ? x + y : x * y;
    for (size_t i = rank; i-- > 0;) {
      if (++idx[i] < out.shape[i]) break;
      idx[i] = 0;
    }
  }
  return true;
}

bool concat(const FloatTensor& a, const FloatTensor& b, int64_t axis, FloatTensor& out) {
  const auto rank = static_cast<int64_t>(a.shape.size());
  if (axis < 0) axis += rank;
  if (b.shape.size() != a.shape.size() || axis < 0 || axis >= rank) return false;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < rank; ++i) {
    if (i != axis && a.shape[static_cast<size_t>(i)] != b.shape[static_cast<size_t>(i)])
      return false;
    if (i < axis) outer *= a.shape[static_cast<size_t>(i)];
    if (i > axis) inner *= a.shape[static_cast<size_t>(i)];
  }
  const int64_t ca = a.shape[static_cast<size_t>(axis)] * inner;
  const int64_t cb = b.shape[static_cast<size_t>(axis)] * inner;
  out.shape = a.shape;
  out.shape[static_cast<size_t>(axis)] += b.shape[static_cast<size_t>(axis)];
  out.data.clear();
  for (int64_t o = 0; o < outer; ++o) {
    out.data.insert(out.data.end(), a.data.begin() + o * ca, a.data.begin() + (o + 1) * ca);
    out.data.insert(out.data.end(), b.data.begin() + o * cb, b.data.begin() + (o + 1) * cb);
  }
  return true;
}

}  // namespace npuflow::encoder
