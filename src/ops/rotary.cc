#include "ops/rotary.h"

#include <cstddef>
#include <vector>

namespace npuflow {

void apply_rotary(float* qkv, int64_t tokens, int64_t hidden, int64_t heads,
                  const RotaryTables& tables) {
  const int64_t head_dim = hidden / heads;
  const int64_t half = head_dim / 2;
  std::vector<float> x(static_cast<size_t>(head_dim));
  for (int64_t t = 0; t < tokens; ++t) {
    const float* cos = tables.cos + t * head_dim;
    const float* sin = tables.sin + t * head_dim;
    for (int64_t block = 0; block < 2; ++block) {  // q, then k
      for (int64_t h = 0; h < heads; ++h) {
        float* y = qkv + t * 3 * hidden + block * hidden + h * head_dim;
        for (int64_t i = 0; i < head_dim; ++i) x[static_cast<size_t>(i)] = y[i];
        for (int64_t i = 0; i < half; ++i) {
          y[i] = x[static_cast<size_t>(i)] * cos[i] - x[static_cast<size_t>(i + half)] * sin[i];
          y[i + half] = x[static_cast<size_t>(i + half)] * cos[i + half] +
                        x[static_cast<size_t>(i)] * sin[i + half];
        }
      }
    }
  }
}

PermutedTable permute_table(const float* data, std::vector<int64_t> shape,
                            const std::vector<int64_t>& perm) {
  const size_t rank = perm.size();
  while (shape.size() < rank) shape.insert(shape.begin(), 1);
  PermutedTable out;
  if (shape.size() != rank) return out;
  std::vector<int64_t> in_strides(rank, 1);
  for (size_t i = rank; i-- > 1;) in_strides[i - 1] = in_strides[i] * shape[i];
  out.shape.resize(rank);
  for (size_t i = 0; i < rank; ++i) out.shape[i] = shape[static_cast<size_t>(perm[i])];
  int64_t count = 1;
  for (int64_t d : out.shape) count *= d;
  out.data.resize(static_cast<size_t>(count));
  std::vector<int64_t> index(rank, 0);  // in the output's dims
  for (int64_t e = 0; e < count; ++e) {
    int64_t offset = 0;
    for (size_t i = 0; i < rank; ++i) offset += index[i] * in_strides[static_cast<size_t>(perm[i])];
    out.data[static_cast<size_t>(e)] = data[offset];
    for (size_t i = rank; i-- > 0;) {
      if (++index[i] < out.shape[i]) break;
      index[i] = 0;
    }
  }
  return out;
}

}  // namespace npuflow
