#include "cli/png_chart.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>

#include "core/strings.h"

namespace npuflow::cli {
namespace {

// 5x7 glyphs, one byte per row, bit 4 = leftmost column.
const std::map<char, std::array<uint8_t, 7>>& font() {
  static const std::map<char, std::array<uint8_t, 7>> glyphs = {
      {'0', {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}},
      {'1', {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}},
      {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}},
      {'3', {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E}},
      {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}},
      {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}},
      {'6', {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}},
      {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
      {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}},
      {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}},
      {'A', {0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}},
      {'B', {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E}},
      {'C', {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E}},
      {'D', {0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C}},
      {'E', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F}},
      {'F', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10}},
      {'G', {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F}},
      {'H', {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}},
      {'I', {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}},
      {'J', {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C}},
      {'K', {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11}},
      {'L', {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F}},
      {'M', {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11}},
      {'N', {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11}},
      {'O', {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}},
      {'P', {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10}},
      {'Q', {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D}},
      {'R', {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11}},
      {'S', {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E}},
      {'T', {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}},
      {'U', {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}},
      {'V', {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04}},
      {'W', {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A}},
      {'X', {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11}},
      {'Y', {0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04}},
      {'Z', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F}},
      {'.', {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C}},
      {'_', {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F}},
      {'-', {0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00}},
      {':', {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00}},
      {'/', {0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00}},
      {'(', {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}},
      {')', {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}},
      {'%', {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03}},
      {'=', {0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00}},
      {',', {0x00, 0x00, 0x00, 0x00, 0x0C, 0x04, 0x08}},
      {'\'', {0x04, 0x04, 0x08, 0x00, 0x00, 0x00, 0x00}},
      {'+', {0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00}},
  };
  return glyphs;
}

class Canvas {
 public:
  Canvas(int width, int height)
      : width_(width), height_(height), pixels_(width * height * 3, 255) {}

  void fill(int x0, int y0, int x1, int y1, const unsigned char rgb[3]) {
    for (int y = std::max(0, y0); y < std::min(height_, y1); ++y)
      for (int x = std::max(0, x0); x < std::min(width_, x1); ++x)
        std::copy(rgb, rgb + 3, &pixels_[(y * width_ + x) * 3]);
  }

  // Text at 2x scale: 12 px per character, 14 px high.
  void text(int x, int y, const std::string& s, const unsigned char rgb[3]) {
    for (char raw : s) {
      const char c = static_cast<char>(std::toupper(static_cast<unsigned char>(raw)));
      auto it = font().find(c);
      if (it != font().end()) {
        for (int row = 0; row < 7; ++row)
          for (int col = 0; col < 5; ++col)
            if (it->second[row] & (0x10 >> col))
              fill(x + col * 2, y + row * 2, x + col * 2 + 2, y + row * 2 + 2, rgb);
      }
      x += 12;
    }
  }

  Status save_png(const std::string& path) const {
    std::vector<uint8_t> raw;  // filter byte 0 + RGB per scanline
    for (int y = 0; y < height_; ++y) {
      raw.push_back(0);
      raw.insert(raw.end(), pixels_.begin() + y * width_ * 3,
                 pixels_.begin() + (y + 1) * width_ * 3);
    }
    // zlib stream of stored (uncompressed) deflate blocks.
    std::vector<uint8_t> z = {0x78, 0x01};
    for (size_t pos = 0; pos < raw.size() || raw.empty();) {
      const size_t len = std::min<size_t>(65535, raw.size() - pos);
      const bool last = pos + len == raw.size();
      z.push_back(last ? 1 : 0);
      z.push_back(len & 0xFF);
      z.push_back(len >> 8);
      z.push_back(~len & 0xFF);
      z.push_back((~len >> 8) & 0xFF);
      z.insert(z.end(), raw.begin() + pos, raw.begin() + pos + len);
      pos += len;
      if (last) break;
    }
    uint32_t a = 1, b = 0;
    for (uint8_t v : raw) {
      a = (a + v) % 65521;
      b = (b + a) % 65521;
    }
    push_u32(z, (b << 16) | a);

    std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    std::vector<uint8_t> header;
    push_u32(header, width_);
    push_u32(header, height_);
    header.insert(header.end(), {8, 2, 0, 0, 0});  // 8-bit RGB, no interlace
    chunk(png, "IHDR", header);
    chunk(png, "IDAT", z);
    chunk(png, "IEND", {});
    FILE* file = std::fopen(path.c_str(), "wb");
    if (!file) return invalid_argument(str_cat("cannot write '", path, "'"));
    const bool ok = std::fwrite(png.data(), 1, png.size(), file) == png.size();
    return std::fclose(file) == 0 && ok ? Status::ok()
                                        : invalid_argument(str_cat("writing '", path, "' failed"));
  }

 private:
  static void push_u32(std::vector<uint8_t>& out, uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back((v >> shift) & 0xFF);
  }
  static uint32_t crc32(const uint8_t* data, size_t size, uint32_t crc) {
    for (size_t i = 0; i < size; ++i) {
      crc ^= data[i];
      for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return crc;
  }
  static void chunk(std::vector<uint8_t>& png, const char* type, const std::vector<uint8_t>& data) {
    push_u32(png, static_cast<uint32_t>(data.size()));
    const size_t start = png.size();
    png.insert(png.end(), type, type + 4);
    png.insert(png.end(), data.begin(), data.end());
    const uint32_t crc = crc32(png.data() + start, png.size() - start, 0xFFFFFFFFu) ^ 0xFFFFFFFFu;
    push_u32(png, crc);
  }

  int width_, height_;
  std::vector<uint8_t> pixels_;
};

}  // namespace

Status write_bar_chart_png(const std::string& path, const std::string& title,
                           const std::string& unit, const std::vector<ChartSeries>& series,
                           const std::vector<ChartRow>& rows) {
  const unsigned char ink[3] = {30, 30, 30};
  const unsigned char grid[3] = {210, 210, 210};
  size_t label_chars = 4;
  double max_value = 0;
  for (const ChartRow& row : rows) {
    label_chars = std::max(label_chars, std::min<size_t>(row.label.size(), 28));
    for (double v : row.values) {
      if (!(v >= 0 && std::isfinite(v))) {
        return invalid_argument(str_cat("chart '", title, "': bar '", row.label, "' is ", v));
      }
      max_value = std::max(max_value, v);
    }
  }
  if (max_value <= 0) max_value = 1;
  const int bar_h = 14, gap = 10;
  const int left = 20 + static_cast<int>(label_chars) * 12 + 10;
  const int plot_w = 560;
  const int top = 80;
  const int row_h = static_cast<int>(series.size()) * (bar_h + 2) + gap;
  const int width = left + plot_w + 150;
  const int height = top + static_cast<int>(rows.size()) * row_h + 40;
  Canvas canvas(width, height);
  canvas.text(20, 16, title, ink);
  int legend_x = 20;
  for (const ChartSeries& s : series) {
    canvas.fill(legend_x, 48, legend_x + 14, 62, s.rgb);
    canvas.text(legend_x + 20, 48, s.name, ink);
    legend_x += 20 + static_cast<int>(s.name.size()) * 12 + 30;
  }
  for (int tick = 0; tick <= 4; ++tick) {
    const int x = left + plot_w * tick / 4;
    canvas.fill(x, top - 4, x + 1, height - 36, grid);
    canvas.text(x - 10, height - 30, str_cat(std::trunc(max_value * tick / 4 * 100) / 100.0), ink);
  }
  canvas.text(left + plot_w + 70, height - 30, unit, ink);
  for (size_t r = 0; r < rows.size(); ++r) {
    const int y = top + static_cast<int>(r) * row_h;
    canvas.text(20, y + 4, rows[r].label.substr(0, 28), ink);
    for (size_t s = 0; s < series.size() && s < rows[r].values.size(); ++s) {
      const int y0 = y + static_cast<int>(s) * (bar_h + 2);
      const int w = static_cast<int>(plot_w * rows[r].values[s] / max_value);
      canvas.fill(left, y0, left + std::max(w, 1), y0 + bar_h, series[s].rgb);
      canvas.text(left + w + 6, y0, str_cat(std::trunc(rows[r].values[s] * 1000) / 1000.0), ink);
    }
  }
  return canvas.save_png(path);
}

}  // namespace npuflow::cli
