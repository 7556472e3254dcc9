#include "graph/encoder/grid_tiling.h"

#include <cstddef>

namespace npuflow::encoder {

GridTiling GridTiling::of(int64_t batch, int64_t height, int64_t width, int64_t channels,
                          int64_t window) {
  GridTiling t;
  if (window == height && window == width) window = 0;  // one window that is the grid: the grid
  t.batch = batch;
  t.height = height;
  t.width = width;
  t.channels = channels;
  t.window = window;
  t.rows = window > 0 ? window : height;
  t.cols = window > 0 ? window : width;
  t.down = (height + t.rows - 1) / t.rows;
  t.across = (width + t.cols - 1) / t.cols;
  return t;
}

int64_t GridTiling::source(int64_t w, int64_t r, int64_t c, int64_t ch) const {
  const int64_t image = w / (down * across), at = w % (down * across);
  const int64_t y = at / across * rows + r, x = at % across * cols + c;
  if (y >= height || x >= width) return -1;
  return ((image * height + y) * width + x) * channels + ch;
}

std::vector<int32_t> GridTiling::partitioned() const {
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(windows() * rows * cols * channels));
  for (int64_t w = 0; w < windows(); ++w)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        for (int64_t ch = 0; ch < channels; ++ch)
          out.push_back(static_cast<int32_t>(source(w, r, c, ch)));
  return out;
}

std::vector<int32_t> GridTiling::unpartitioned() const {
  std::vector<int32_t> out(static_cast<size_t>(batch * height * width * channels), -1);
  int32_t element = 0;
  for (int64_t w = 0; w < windows(); ++w)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        for (int64_t ch = 0; ch < channels; ++ch, ++element)
          if (const int64_t s = source(w, r, c, ch); s >= 0) out[static_cast<size_t>(s)] = element;
  return out;
}

}  // namespace npuflow::encoder
