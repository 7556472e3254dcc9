// A small tensor of element indices that replays a chain of layout ops (Reshape, Transpose, and
// the selectors Split/Slice/Gather), to check that the chain moves data exactly as a head split,
// head merge or patch flatten must. Works for any exporter's op sequence: only the data movement
// is compared, never the ops themselves.
#pragma once

#include <cstdint>
#include <vector>

namespace npuflow::encoder {

struct IndexTensor {
  std::vector<int64_t> shape;
  std::vector<int32_t> data;

  // [0, 1, ..., n-1] laid out in `shape`.
  static IndexTensor iota(std::vector<int64_t> shape);

  // ONNX Reshape semantics: a 0 copies the input dim, one -1 is inferred. False if impossible.
  bool reshape(std::vector<int64_t> target);
  bool transpose(const std::vector<int64_t>& perm);
  // Keeps [start, start + len) of `axis` (Split, Slice), or drops the axis after taking one
  // index of it (Gather with a scalar index).
  bool select(int64_t axis, int64_t start, int64_t len, bool drop);
  // Constant padding: `before[i]` and `after[i]` new entries on axis i hold kPadded (no element).
  // Negative amounts crop, as ONNX Pad does.
  bool pad(const std::vector<int64_t>& before, const std::vector<int64_t>& after);
  static constexpr int32_t kPadded = -1;
};

}  // namespace npuflow::encoder
