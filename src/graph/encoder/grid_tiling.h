// SAM's window partition by meaning: which stream element each window's token holds. What the
// grid matcher replays a graph's Pad/Reshape/Transpose/Slice chains against (grid.cc).
#pragma once

#include <cstdint>
#include <vector>

namespace npuflow::encoder {

// An image's height x width tokens zero-padded to whole windows of rows x cols and cut into
// down x across of them, image after image (a global block: one window, the grid itself).
struct GridTiling {
  int64_t batch = 1, height = 0, width = 0, channels = 0;
  int64_t window = 0;  // 0: the whole grid
  int64_t rows = 0, cols = 0, down = 1, across = 1;

  // Windows of `window` tokens a side, or the whole grid when window is 0 (or is the grid).
  static GridTiling of(int64_t batch, int64_t height, int64_t width, int64_t channels,
                       int64_t window);
  int64_t windows() const { return batch * down * across; }
  // The stream element [batch, height, width, channels] that window w's token (r, c) holds in
  // channel ch, or -1 where the padded grid has none.
  int64_t source(int64_t w, int64_t r, int64_t c, int64_t ch) const;
  // The windows [windows, rows, cols, channels] as stream element indices (-1: padding).
  std::vector<int32_t> partitioned() const;
  // The stream [batch, height, width, channels] as element indices of the windows.
  std::vector<int32_t> unpartitioned() const;
};

}  // namespace npuflow::encoder
