// A dependency-free bar chart rendered to PNG (8-bit RGB, uncompressed deflate blocks), for
// `npuflow plan --plot`: per row, one bar per series, with a small built-in bitmap font.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace npuflow::cli {

struct ChartSeries {
  std::string name;
  unsigned char rgb[3];
};

struct ChartRow {
  std::string label;
  std::vector<double> values;  // one per series
};

Status write_bar_chart_png(const std::string& path, const std::string& title,
                           const std::string& unit, const std::vector<ChartSeries>& series,
                           const std::vector<ChartRow>& rows);

}  // namespace npuflow::cli
